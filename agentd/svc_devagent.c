/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The ManageAgentOps service (proto/devagent.proto), kept wire-compatible
 * with what Dev_Agent already speaks: CreateFiles and ViewFile here (on the
 * completion-queue threads, through fsops.h), ExecuteCommands registered
 * here but served by svc_exec.c on the loop thread.
 *
 * CreateFiles checks every name before it writes any file: equal counts
 * (INVALID_ARGUMENT), no empty or directory-like names (INVALID_ARGUMENT),
 * nothing outside the root (PERMISSION_DENIED), no existing directory in the
 * way (FAILED_PRECONDITION). Each file is then written atomically (temp
 * file, fsync, rename; fsops_write_file). A failure while writing (ENOSPC,
 * a race) leaves the files before it written and the rest untouched.
 *
 * Limits: ViewFile returns at most agentd.view_limit bytes (else
 * RESOURCE_EXHAUSTED with the limit in the message); its reply field is a
 * proto3 string, so content that is not UTF-8, or holds a NUL byte (which
 * protobuf-c's C strings cannot carry), is FAILED_PRECONDITION. The same
 * C-string representation (protobuf-c 1.4 hands string fields over
 * NUL-terminated) makes rpc_server.c refuse, INVALID_ARGUMENT, a request
 * whose strings hold a NUL character, rather than take them cut short.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentd.h"
#include "devagent.pb-c.h"
#include "fsops.h"
#include "wsb.h"

#define ESC_MAX 256

static void fail_path(struct rpc_call *call, int err, const char *op, const char *path)
{
	char *esc = wsb_escape(path, strlen(path), ESC_MAX);
	const char *q = esc ? esc : "?";

	if (err < 0)
		err = -err;
	if (err == EXDEV)
		rpc_finish(call, WSB_PERMISSION_DENIED, EXDEV, "'%s' escapes the workspace root", q);
	else
		rpc_fail_errno(call, err, "%s '%s'", op, q);
	free(esc);
}

/* "app_name/file", or "file" for an empty app_name; malloc'd. */
static char *join(const char *app, const char *file)
{
	size_t a = strlen(app), f = strlen(file);
	char *p = malloc(a + f + 2);

	if (!p)
		return NULL;
	memcpy(p, app, a);
	if (a)
		p[a++] = '/';
	memcpy(p + a, file, f + 1);
	return p;
}

/* End @p call INVALID_ARGUMENT for files[@p i], @p file, and why (a
 * static string); returns -1. */
static int name_refused(struct rpc_call *call, size_t i, const char *file, const char *why)
{
	char *esc = wsb_escape(file, strlen(file), ESC_MAX);

	rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL, "files[%zu] '%s': %s", i, esc ? esc : "?",
		   why);
	free(esc);
	return -1;
}

/*
 * Check one CreateFiles name before anything is written. Returns 0, or ends
 * @p call and returns -1.
 */
static int check_name(struct rpc_call *call, const struct resolve_root *root, size_t i,
		      const char *file, const char *path)
{
	const char *last, *s = file;
	size_t n = strlen(file);
	struct stat st;
	char *name, *esc;
	int dirfd, r;

	while (*s == '/')
		s++;
	last = strrchr(file, '/');
	last = last ? last + 1 : file;
	if (*s == '\0' || file[n - 1] == '/' || strcmp(last, ".") == 0 ||
	    strcmp(last, "..") == 0)
		return name_refused(call, i, file,
				    "empty file name (a file name must not be empty, end in '/', "
				    "or be '.' or '..')");
	if (resolve_climbs_out(path)) {
		fail_path(call, EXDEV, "create", path);
		return -1;
	}
	r = resolve_parent(root, path, strlen(path), &dirfd, &name);
	if (r == -ENOENT && resolve_has_dotdot(path))
		return name_refused(call, i, file,
				    "a '..' in a path whose directories do not all exist yet (where "
				    "it leads would depend on what is made first)");
	if (r == -ENOENT)
		return 0; /* missing directories will be created */
	if (r < 0) {
		fail_path(call, r, "create", path);
		return -1;
	}
	r = fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
	close(dirfd);
	free(name);
	if (r) {
		esc = wsb_escape(path, strlen(path), ESC_MAX);
		rpc_finish(call, WSB_FAILED_PRECONDITION, EISDIR, "create '%s': is a directory",
			   esc ? esc : "?");
		free(esc);
		return -1;
	}
	return 0;
}

/*
 * Whether the client cancelled @p call or its deadline passed, before file
 * @p i of @p n; ends the call then, DEADLINE_EXCEEDED or CANCELLED as the
 * gRPC status codes doc has them (a deadline that passed is
 * DEADLINE_EXCEEDED even though rpc_cancelled() is true then too). The
 * files before i stay written.
 */
static bool gone(struct rpc_call *call, size_t i, size_t n)
{
	if (rpc_deadline_ms(call) == 0) {
		rpc_finish(call, WSB_DEADLINE_EXCEEDED, ETIMEDOUT,
			   "CreateFiles: past its deadline after %zu of %zu files; those "
			   "stay written, the rest were not",
			   i, n);
		return true;
	}
	if (!rpc_cancelled(call))
		return false;
	rpc_finish(call, WSB_CANCELLED, ECANCELED,
		   "CreateFiles: cancelled after %zu of %zu files; those stay written, the "
		   "rest were not",
		   i, n);
	return true;
}

static void do_create_files(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const CreateFileRequest *q = (const void *)req;
	CreateFileResponse rep = CREATE_FILE_RESPONSE__INIT;
	struct agentd *ad = data;
	const char *app = q->app_name ? q->app_name : "";
	/* keep_mode: a file written over keeps its rwx bits, as Dev_Agent's
	 * open(path, "w") kept them (a script stays executable). */
	const struct fsops_upload_opts opts = { .mode = 0644, .mkdirs = true, .keep_mode = true };
	char **paths;
	size_t i;
	int r;

	if (q->n_files != q->n_contents) {
		rpc_finish(call, WSB_INVALID_ARGUMENT, EINVAL,
			   "CreateFiles: %zu files but %zu contents (they must pair up); nothing "
			   "was written",
			   q->n_files, q->n_contents);
		return;
	}
	paths = calloc(q->n_files + 1, sizeof(*paths));
	if (!paths) {
		rpc_fail_errno(call, ENOMEM, "CreateFiles");
		return;
	}
	for (i = 0; i < q->n_files; i++) {
		const char *file = q->files[i] ? q->files[i] : "";

		if (gone(call, 0, q->n_files))
			goto out;
		paths[i] = join(app, file);
		if (!paths[i]) {
			rpc_fail_errno(call, ENOMEM, "CreateFiles");
			goto out;
		}
		if (check_name(call, &ad->root, i, file, paths[i]) < 0)
			goto out;
	}
	for (i = 0; i < q->n_files; i++) {
		const char *c = q->contents[i] ? q->contents[i] : "";

		/* One request may name millions of files (hours of work on
		 * a cq thread): stop once nobody waits for the answer. */
		if (gone(call, i, q->n_files))
			goto out;
		r = fsops_write_file(&ad->root, paths[i], strlen(paths[i]), c, strlen(c), &opts);
		if (r < 0) {
			fail_path(call, r, "create", paths[i]);
			goto out;
		}
	}
	rep.status = (char *)"success";
	rpc_reply(call, &rep.base);
out:
	for (i = 0; i < q->n_files; i++)
		free(paths[i]);
	free(paths);
}

/*
 * Is @p s (@p n bytes) UTF-8 as RFC 3629 defines it (no overlong forms, no
 * surrogates, nothing above U+10FFFF)? *ret_nul is set when it holds a NUL.
 */
static bool utf8_valid(const unsigned char *s, size_t n, bool *ret_nul)
{
	size_t i = 0;

	*ret_nul = false;
	while (i < n) {
		unsigned char c = s[i];
		size_t k;
		uint32_t cp, min;

		if (c < 0x80) {
			if (c == 0)
				*ret_nul = true;
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			k = 1;
			cp = c & 0x1f;
			min = 0x80;
		} else if ((c & 0xf0) == 0xe0) {
			k = 2;
			cp = c & 0x0f;
			min = 0x800;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3;
			cp = c & 0x07;
			min = 0x10000;
		} else {
			return false;
		}
		if (n - i <= k)
			return false;
		for (size_t j = 1; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + j] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

static void do_view_file(struct rpc_call *call, const ProtobufCMessage *req, void *data)
{
	const ViewFileRequest *q = (const void *)req;
	ViewFileResponse rep = VIEW_FILE_RESPONSE__INIT;
	struct agentd *ad = data;
	const char *path = q->path ? q->path : "";
	size_t limit = ad->view_limit ? ad->view_limit : AGENTD_VIEW_LIMIT_DEFAULT;
	char *buf, *esc;
	size_t n;
	bool nul;
	int r;

	r = fsops_read_file(&ad->root, path, strlen(path), limit, &buf, &n);
	if (r < 0) {
		esc = wsb_escape(path, strlen(path), ESC_MAX);
		if (r == -EISDIR)
			rpc_finish(call, WSB_FAILED_PRECONDITION, EISDIR, "'%s' is a directory",
				   esc ? esc : "?");
		else if (r == -EINVAL)
			rpc_finish(call, WSB_FAILED_PRECONDITION, EINVAL,
				   "'%s' is not a regular file", esc ? esc : "?");
		else if (r == -EFBIG)
			rpc_finish(call, WSB_RESOURCE_EXHAUSTED, EFBIG,
				   "'%s' is larger than the ViewFile limit of %zu bytes",
				   esc ? esc : "?", limit);
		else
			fail_path(call, r, "view", path);
		free(esc);
		return;
	}
	if (!utf8_valid((const unsigned char *)buf, n, &nul) || nul) {
		esc = wsb_escape(path, strlen(path), ESC_MAX);
		rpc_finish(call, WSB_FAILED_PRECONDITION, EILSEQ, "'%s' is not UTF-8 text%s",
			   esc ? esc : "?", nul ? " (it contains a NUL byte)" : "");
		free(esc);
		free(buf);
		return;
	}
	rep.code = buf; /* NUL-terminated by fsops_read_file */
	rpc_reply(call, &rep.base);
	free(buf);
}

static struct rpc_method da_methods[] = {
	{ "/ManageAgentOps/CreateFiles", RPC_UNARY, RPC_ON_CQ, &create_file_request__descriptor,
	  false, do_create_files, NULL },
	{ "/ManageAgentOps/ViewFile", RPC_UNARY, RPC_ON_CQ, &view_file_request__descriptor, false,
	  do_view_file, NULL, /* reply_budget: a pure read */ true },
	{ "/ManageAgentOps/ExecuteCommands", RPC_UNARY, RPC_ON_LOOP,
	  &execute_commands_request__descriptor, false, svc_devagent_execute_commands, NULL },
};

int svc_devagent_register(struct rpc_server *s, struct agentd *ad)
{
	for (size_t i = 0; i < sizeof(da_methods) / sizeof(da_methods[0]); i++) {
		int r;

		da_methods[i].data = ad;
		r = rpc_server_register(s, &da_methods[i]);
		if (r < 0)
			return r;
	}
	return 0;
}
