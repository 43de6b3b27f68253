/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * agentd: serves a workspace directory (wsbridge.v1.Workspace), runs commands
 * in it (wsbridge.v1.Exec), and speaks Dev_Agent's ManageAgentOps, over gRPC.
 * Parses options, opens the root, starts the transport and the libuv loop,
 * and drains calls on SIGTERM. The loop runs on the main thread.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agentd.h"
#include "config.h"
#include "exec.h"
#include "fsops.h"
#include "session.h"
#include "watch.h"
#include "wsb.h"

#define DEFAULT_ROOT "/workspace"
#define DEFAULT_LISTEN "127.0.0.1:9000"
#define MAX_LISTEN 16
/* Open files agentd wants besides --max-handles: connections, the pipes of
 * --max-procs commands, uploads, the watch. */
#define NOFILE_RESERVE 2048u
/* --drain-grace: how long running calls may finish after SIGTERM, s. */
#define DRAIN_GRACE_DEFAULT_S 10u
#define DRAIN_GRACE_MAX_S 3600u
#define MAX_RECV_BYTES (64u << 20)
/* --max-reply-bytes: default and range, bytes (rpc_server_config). */
#define MAX_REPLY_DEFAULT ((size_t)256 << 20)
#define MAX_REPLY_MIN ((size_t)8 << 20)
#define MAX_REPLY_MAX ((size_t)1 << 40)

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: agentd [OPTION]...\n"
		"Serve a workspace directory and run commands in it over gRPC.\n"
		"\n"
		"  -r, --root DIR         workspace root (default " DEFAULT_ROOT ")\n"
		"  -l, --listen ADDR      listen on ADDR: HOST:PORT or unix:/PATH; repeatable\n"
		"                         (default " DEFAULT_LISTEN ")\n"
		"      --stdio            serve one connection over stdin/stdout instead\n"
		"      --token-file FILE  require 'authorization: Bearer TOKEN' on every call;\n"
		"                         needed for any listener beyond loopback\n"
		"      --log-level LEVEL  error, warning, notice (default), info, debug\n"
		"      --view-limit BYTES largest file ViewFile returns (default %zu)\n"
		"      --max-handles N    open file handles allowed (default 4096)\n"
		"      --session-grace SECONDS  how long a client's open handles outlive its\n"
		"                         last call or stream (default %u; %u to 86400)\n"
		"      --drain-grace SECONDS  how long running calls may finish after SIGTERM\n"
		"                         before they are cancelled (default %u; 0 to %u)\n"
		"      --max-watches N    directories watched for the Watch stream at most\n"
		"                         (default: the kernel's fs.inotify.max_user_watches)\n"
		"      --max-procs N      commands running at once (default %u)\n"
		"      --journal-size BYTES  output kept per command and stream for Exec.Attach\n"
		"                         (default %zu; %zu to %zu)\n"
		"      --exit-keep SECONDS  how long an exit status is kept after the command\n"
		"                         ends (default %llu)\n"
		"      --max-reply-bytes BYTES  replies its clients have not read yet that\n"
		"                         agentd holds at most; past it a reply over 4 KiB\n"
		"                         to a pure read (Read, ReadDir, ViewFile) fails\n"
		"                         RESOURCE_EXHAUSTED, and others wait or shrink\n"
		"                         (default %zu; %zu to %zu)\n"
		"      --threads N        completion-queue threads (default 4); one polls at a\n"
		"                         time, another when a call takes over 2 ms\n"
		"  -h, --help             show this help\n"
		"  -V, --version          show the version\n",
		AGENTD_VIEW_LIMIT_DEFAULT, SESSION_GRACE_DEFAULT_S, SESSION_GRACE_MIN_S,
		DRAIN_GRACE_DEFAULT_S, DRAIN_GRACE_MAX_S, EXEC_MAX_PROCESSES_DEFAULT,
		EXEC_JOURNAL_DEFAULT, (size_t)EXEC_JOURNAL_MIN, (size_t)EXEC_JOURNAL_MAX,
		(unsigned long long)(EXEC_EXIT_KEEP_DEFAULT_MS / 1000), MAX_REPLY_DEFAULT,
		MAX_REPLY_MIN, MAX_REPLY_MAX);
}

/* True for a listen address that only this machine can reach. */
static bool addr_is_local(const char *addr)
{
	char host[256];
	const char *colon;
	struct in6_addr a6;
	struct in_addr a4;
	size_t n;

	if (strncmp(addr, "unix:", 5) == 0 || strncmp(addr, "unix-abstract:", 14) == 0)
		return true;
	if (addr[0] == '[') {
		const char *end = strchr(addr, ']');
		if (!end)
			return false;
		n = (size_t)(end - addr - 1);
		if (n >= sizeof(host))
			return false;
		memcpy(host, addr + 1, n);
		host[n] = '\0';
		return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
	}
	colon = strrchr(addr, ':');
	n = colon ? (size_t)(colon - addr) : strlen(addr);
	if (n >= sizeof(host))
		return false;
	memcpy(host, addr, n);
	host[n] = '\0';
	if (strcmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	return false;
}

/* The socket address of "unix:PATH" or "unix://PATH" into *@sun. Returns 0
 * or -ENAMETOOLONG (sun_path holds 107 bytes, unix(7)). */
static int unix_sockaddr(const char *addr, struct sockaddr_un *sun)
{
	const char *path = addr + 5;

	if (strncmp(path, "//", 2) == 0)
		path += 2;
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sun->sun_path))
		return -ENAMETOOLONG;
	strcpy(sun->sun_path, path);
	return 0;
}

/* gRPC unlinks and rebinds a unix socket path that exists; refuse instead
 * when another server still answers on it. */
static int unix_addr_in_use(const char *addr)
{
	struct sockaddr_un sun;
	int fd, r;

	r = unix_sockaddr(addr, &sun);
	if (r < 0)
		return r;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	r = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
	close(fd);
	return r == 0 ? -EADDRINUSE : 0;
}

/*
 * Why gRPC could not listen on @addr (grpc_server_add_http2_port says only
 * that it failed): bind a socket of our own to it, as gRPC would, and give
 * that errno (bind(2), unix(7)): -EADDRINUSE, -EACCES (a port below 1024,
 * a directory agentd may not write), -ENOENT (no such directory),
 * -EADDRNOTAVAIL (not an address of this machine), -ENOTSOCK (a unix path
 * that exists and is no socket: gRPC replaces only a stale socket), ...
 * -EADDRINUSE when our bind works (gRPC's reason is unknown then).
 */
static int listen_error(const char *addr)
{
	char host[256], port[16];
	const char *colon, *h = addr;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
	size_t n;
	int fd, r = -EADDRINUSE;

	if (strncmp(addr, "unix:", 5) == 0) {
		struct sockaddr_un sun;
		struct stat st;

		r = unix_sockaddr(addr, &sun);
		if (r < 0)
			return r;
		if (lstat(sun.sun_path, &st) == 0 && !S_ISSOCK(st.st_mode))
			return -ENOTSOCK;
		r = -EADDRINUSE;
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0)
			r = -errno;
		else
			unlink(sun.sun_path); /* ours: gone again */
		close(fd);
		return r;
	}
	colon = strrchr(addr, ':');
	if (!colon || strlen(colon + 1) >= sizeof(port))
		return r;
	n = (size_t)(colon - addr);
	if (addr[0] == '[' && n >= 2 && addr[n - 1] == ']') {
		h = addr + 1;
		n -= 2;
	}
	if (n >= sizeof(host))
		return r;
	memcpy(host, h, n);
	host[n] = '\0';
	strcpy(port, colon + 1);
	if (getaddrinfo(n ? host : NULL, port, &hints, &ai) != 0)
		return r;
	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd >= 0) {
		int one = 1;

		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
			r = -errno;
		close(fd);
	}
	freeaddrinfo(ai);
	return r;
}

/*
 * Raise the soft RLIMIT_NOFILE to the hard one (getrlimit(2)) and return
 * the soft one agentd was started with (0 if unchanged), for its commands
 * (exec_config.child_nofile). gRPC 1.51 stops accepting on a listener for
 * good once accept4(2) fails EMFILE (tcp_server_posix.cc): with the 1024
 * a login shell gives, --max-handles' 4096 open files would end the
 * listener.
 */
static unsigned long raise_nofile(void)
{
	struct rlimit rl;
	rlim_t was;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return 0;
	was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		/* RLIM_INFINITY is above fs.nr_open: take that. */
		FILE *fp = fopen("/proc/sys/fs/nr_open", "re");
		unsigned long nr = 0;

		if (!fp || fscanf(fp, "%lu", &nr) != 1 || nr <= was) {
			if (fp)
				fclose(fp);
			return 0;
		}
		fclose(fp);
		rl.rlim_cur = nr;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			return 0;
	}
	wsb_info("open files: soft limit raised from %lu to %lu (commands get %lu)",
		 (unsigned long)was, (unsigned long)rl.rlim_cur, (unsigned long)was);
	return (unsigned long)was;
}

struct app {
	struct agentd ad;
	struct rpc_server *server;
	uv_signal_t sigterm, sigint;
	uv_timer_t reap; /* sessions_reap() */
	uv_timer_t stop_wait; /* on_stop_wait(): commands ending after TERM */
	int64_t stop_deadline_ns; /* CLOCK_MONOTONIC: stop waiting for them */
	unsigned drain_grace_s; /* --drain-grace */
	bool stopping;
	bool stdio;
	char *token; /* --token-file's; static storage, so the early exits
		      * (return 1) leave it reachable, not leaked */
};

/* The last step of a stop: what still runs is killed, the loop ends. */
static void app_finish(struct app *app)
{
	if (app->ad.exec)
		exec_table_kill_all(app->ad.exec, EXEC_KILLED_SHUTDOWN);
	uv_signal_stop(&app->sigterm);
	uv_signal_stop(&app->sigint);
	uv_timer_stop(&app->reap);
	uv_close((uv_handle_t *)&app->reap, NULL);
	uv_close((uv_handle_t *)&app->sigterm, NULL);
	uv_close((uv_handle_t *)&app->sigint, NULL);
	/* The server's uv_async keeps the loop alive; main() closes it. */
	uv_stop(app->ad.loop);
}

/* Every 50 ms after the TERM (on_drained()): go on once the commands
 * ended, or once their KILL had time to work. */
static void on_stop_wait(uv_timer_t *t)
{
	struct app *app = t->data;

	if (exec_table_running(app->ad.exec) > 0 && wsb_mono_ns() < app->stop_deadline_ns)
		return;
	uv_close((uv_handle_t *)t, NULL);
	app_finish(app);
}

/* rpc_server_shutdown()'s done: the calls have ended (commands whose
 * calls were cancelled at the grace were killed with them). The commands
 * still running, detached ones, get SIGTERM, then SIGKILL after
 * EXEC_KILL_GRACE_MS, as at a timeout; agentd exits once they are gone. */
static void on_drained(void *arg)
{
	struct app *app = arg;

	wsb_info("all calls ended");
	if (!app->ad.exec || exec_table_running(app->ad.exec) == 0) {
		app_finish(app);
		return;
	}
	wsb_notice("stopping %u running command%s: SIGTERM, SIGKILL %u ms later",
		   exec_table_running(app->ad.exec), exec_table_running(app->ad.exec) == 1 ? "" : "s",
		   (unsigned)EXEC_KILL_GRACE_MS);
	exec_table_terminate_all(app->ad.exec, EXEC_KILLED_SHUTDOWN);
	app->stop_deadline_ns = wsb_mono_ns() + (int64_t)(EXEC_KILL_GRACE_MS + 1000) * 1000000;
	uv_timer_init(app->ad.loop, &app->stop_wait);
	app->stop_wait.data = app;
	uv_timer_start(&app->stop_wait, on_stop_wait, 50, 50);
}

/* Stop taking calls and drain the running ones; logs @why at @level
 * (WSB_LOG_*). Loop thread. */
static void app_stop(struct app *app, const char *why, int level)
{
	if (app->stopping)
		return;
	app->stopping = true;
	wsb_log(level, "%s: draining calls (up to %u s)", why, app->drain_grace_s);
	/* Running calls, exec included, may finish within the grace period;
	 * then they are cancelled, which kills their commands. */
	watch_shutdown(svc_workspace_watcher()); /* Watch streams never end by themselves */
	svc_workspace_shutdown();
	rpc_server_shutdown(app->server, (uint64_t)app->drain_grace_s * 1000, on_drained, app);
}

/* sessions_reap()'s callback: a client gone for its grace; its handles go. */
static void session_ended(uint64_t key, const char *id, size_t len, void *arg)
{
	struct agentd *ad = arg;
	unsigned n = fsops_handles_release_owner(ad->handles, key);

	wsb_log(n ? WSB_LOG_NOTICE : WSB_LOG_INFO,
		"session %.*s ended (no call or stream of it for its grace): released %u "
		"open handle%s",
		(int)len, id, n, n == 1 ? "" : "s");
}

static void on_reap(uv_timer_t *t)
{
	struct app *app = t->data;

	sessions_reap(app->ad.sessions, (uint64_t)wsb_mono_ns(), session_ended, &app->ad);
}

static void on_signal(uv_signal_t *h, int signum)
{
	app_stop(h->data, signum == SIGTERM ? "SIGTERM" : "SIGINT", WSB_LOG_NOTICE);
}

static void on_stdio_eof(void *arg)
{
	/* How every --stdio connection ends (wsctl --exec, kubectl exec -i):
	 * nothing to say on the user's terminal. */
	app_stop(arg, "stdin closed", WSB_LOG_INFO);
}

static void log_open_handle(uv_handle_t *h, void *arg)
{
	wsb_debug("at exit, a %s handle is still open", uv_handle_type_name(uv_handle_get_type(h)));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"root", required_argument, NULL, 'r'},
		{"listen", required_argument, NULL, 'l'},
		{"stdio", no_argument, NULL, 's'},
		{"token-file", required_argument, NULL, 't'},
		{"log-level", required_argument, NULL, 'L'},
		{"view-limit", required_argument, NULL, 'v'},
		{"max-handles", required_argument, NULL, 'm'},
		{"max-watches", required_argument, NULL, 'W'},
		{"threads", required_argument, NULL, 'T'},
		{"max-procs", required_argument, NULL, 'P'},
		{"journal-size", required_argument, NULL, 'J'},
		{"exit-keep", required_argument, NULL, 'K'},
		{"session-grace", required_argument, NULL, 'g'},
		{"drain-grace", required_argument, NULL, 'D'},
		{"max-reply-bytes", required_argument, NULL, 'R'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{0},
	};
	const char *root = DEFAULT_ROOT, *token_file = NULL;
	const char *listen[MAX_LISTEN];
	int nlisten = 0, level = WSB_LOG_NOTICE, threads = 4, c, r;
	unsigned long long view_limit = AGENTD_VIEW_LIMIT_DEFAULT, max_handles = 4096, max_watches = 0;
	unsigned long long session_grace = SESSION_GRACE_DEFAULT_S, reap_ms;
	unsigned long long drain_grace = DRAIN_GRACE_DEFAULT_S;
	size_t max_reply = MAX_REPLY_DEFAULT;
	struct exec_config exec_cfg = { .cgroups = true };
	char *end;
	static struct app app;
	struct rpc_server_config cfg = {0};
	uv_loop_t *loop = uv_default_loop();

	wsb_malloc_tune(); /* before any thread: see wsb.h */
	wsb_log_init("agentd", level);
	while ((c = getopt_long(argc, argv, "r:l:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			root = optarg;
			break;
		case 'l':
			if (nlisten == MAX_LISTEN) {
				fprintf(stderr, "agentd: at most %d --listen addresses\n", MAX_LISTEN);
				return 2;
			}
			listen[nlisten++] = optarg;
			break;
		case 's':
			app.stdio = true;
			break;
		case 't':
			token_file = optarg;
			break;
		case 'L':
			level = wsb_log_level_parse(optarg);
			if (level < 0) {
				fprintf(stderr, "agentd: unknown log level '%s'\n", optarg);
				return 2;
			}
			break;
		case 'P':
		case 'J':
		case 'K':
		case 'R': {
			unsigned long long v;
			const char *name = c == 'P'   ? "max-procs"
					   : c == 'J' ? "journal-size"
					   : c == 'K' ? "exit-keep"
						      : "max-reply-bytes";

			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || v == 0 || optarg[0] == '-' ||
			    (c == 'P' && v > 100000) ||
			    (c == 'J' && (v < EXEC_JOURNAL_MIN || v > EXEC_JOURNAL_MAX)) ||
			    (c == 'K' && v > 366ULL * 24 * 3600) ||
			    (c == 'R' && (v < MAX_REPLY_MIN || v > MAX_REPLY_MAX))) {
				if (c == 'J' || c == 'R')
					fprintf(stderr,
						"agentd: bad number '%s' for --%s (%zu to %zu bytes)\n",
						optarg, name,
						c == 'J' ? (size_t)EXEC_JOURNAL_MIN : MAX_REPLY_MIN,
						c == 'J' ? (size_t)EXEC_JOURNAL_MAX : MAX_REPLY_MAX);
				else
					fprintf(stderr, "agentd: bad number '%s' for --%s\n", optarg,
						name);
				return 2;
			}
			if (c == 'P')
				exec_cfg.max_running = (unsigned)v;
			else if (c == 'J')
				exec_cfg.journal_bytes = (size_t)v;
			else if (c == 'K')
				exec_cfg.exit_keep_ms = v * 1000;
			else
				max_reply = (size_t)v;
			break;
		}
		case 'v':
		case 'm':
		case 'W':
		case 'T': {
			unsigned long long v;

			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || v == 0 || optarg[0] == '-' ||
			    (c == 'T' && v > 64) || (c == 'm' && v > 1000000) ||
			    (c == 'W' && v > UINT_MAX)) {
				fprintf(stderr, "agentd: bad number '%s' for --%s\n", optarg,
					c == 'v'   ? "view-limit"
					: c == 'm' ? "max-handles"
					: c == 'W' ? "max-watches"
						   : "threads");
				return 2;
			}
			if (c == 'v')
				view_limit = v;
			else if (c == 'm')
				max_handles = v;
			else if (c == 'W')
				max_watches = v;
			else
				threads = (int)v;
			break;
		}
		case 'g':
			errno = 0;
			session_grace = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || optarg[0] == '-' ||
			    session_grace < SESSION_GRACE_MIN_S || session_grace > 86400) {
				fprintf(stderr,
					"agentd: bad number '%s' for --session-grace (%u to 86400 "
					"seconds)\n",
					optarg, SESSION_GRACE_MIN_S);
				return 2;
			}
			break;
		case 'D':
			errno = 0;
			drain_grace = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || optarg[0] == '-' ||
			    drain_grace > DRAIN_GRACE_MAX_S) {
				fprintf(stderr,
					"agentd: bad number '%s' for --drain-grace (0 to %u "
					"seconds)\n",
					optarg, DRAIN_GRACE_MAX_S);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("agentd " WSB_VERSION "\n");
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "agentd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	wsb_log_init("agentd", level);
	if (app.stdio && nlisten) {
		fprintf(stderr, "agentd: --stdio and --listen exclude each other\n");
		return 2;
	}
	if (max_reply < view_limit + (1u << 20)) {
		fprintf(stderr,
			"agentd: --max-reply-bytes %zu is too small for --view-limit %llu (a "
			"ViewFile reply of that size could never go): give at least %llu\n",
			max_reply, view_limit, view_limit + (1u << 20));
		return 2;
	}
	app.drain_grace_s = (unsigned)drain_grace;
	if (!app.stdio && nlisten == 0)
		listen[nlisten++] = DEFAULT_LISTEN;
	if (token_file) {
		struct stat stb;

		if (stat(token_file, &stb) == 0 && (stb.st_mode & 0077))
			wsb_warn("token file '%s' is readable by group or others", token_file);
		r = wsb_token_read(token_file, &app.token);
		if (r < 0) {
			wsb_err("cannot read token file '%s': %s", token_file,
				r == -EINVAL ? "empty, or not one word of printable ASCII"
				: r == -EFBIG ? "larger than 4096 bytes" : strerror(-r));
			return 1;
		}
	}
	for (int i = 0; i < nlisten; i++) {
		const char *why;

		if (wsb_addr_check(listen[i], &why) < 0) {
			fprintf(stderr, "agentd: bad --listen address '%s': %s\n", listen[i], why);
			return 2;
		}
		if (!app.token && !addr_is_local(listen[i])) {
			wsb_err("refusing to listen on '%s' without --token-file: it is reachable "
				"beyond this machine (only loopback and unix sockets may go without "
				"a token)",
				listen[i]);
			return 1;
		}
	}

	signal(SIGPIPE, SIG_IGN);
	exec_cfg.child_nofile = raise_nofile();
	{
		struct rlimit rl;

		/* Room for every handle besides connections, commands' pipes
		 * and the watch, or a busy agentd meets EMFILE (above). */
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		    max_handles + NOFILE_RESERVE > rl.rlim_cur)
			wsb_warn("--max-handles %llu leaves fewer than %u of the %lu open files "
				 "agentd may have for connections and commands: lower it, or raise "
				 "the limit (ulimit -Hn)",
				 max_handles, NOFILE_RESERVE, (unsigned long)rl.rlim_cur);
	}
	/* Orphans of commands (a daemon's double fork) become agentd's
	 * children, which exec.c's SIGCHLD reaper reaps; as PID 1 in a
	 * container they are agentd's anyway (prctl(2)). */
	if (getpid() != 1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		wsb_info("cannot become a child subreaper: %s", strerror(errno));
	r = resolve_root_open(root, &app.ad.root);
	if (r < 0) {
		wsb_err("cannot open workspace root '%s': %s", root, strerror(-r));
		return 1;
	}
	app.ad.root_path = root;
	app.ad.loop = loop;
	app.ad.view_limit = (size_t)view_limit;
	app.ad.max_handles = (unsigned)max_handles;
	app.ad.max_watches = (unsigned)max_watches;
	r = fsops_handles_new(app.ad.max_handles, &app.ad.handles);
	if (r == 0)
		r = sessions_new(session_grace * 1000000000ULL, &app.ad.sessions);
	if (r == 0)
		r = exec_table_new(loop, &exec_cfg, &app.ad.exec);
	if (r < 0) {
		wsb_err("cannot start: %s", strerror(-r));
		return 1;
	}

	cfg.loop = loop;
	cfg.cq_threads = threads;
	cfg.token = app.token;
	cfg.max_recv_bytes = MAX_RECV_BYTES;
	cfg.max_reply_bytes = max_reply;
	/* A client gone without closing its connection ends its calls, and so
	 * lets its session's grace start, within about the grace itself. */
	cfg.keepalive_ms = (unsigned)(session_grace * 1000 / 2 < 30000 ? session_grace * 1000 / 2
									 : 30000);
	cfg.on_call = svc_session_touch;
	cfg.on_call_arg = &app.ad;
	r = rpc_server_new(&cfg, &app.server);
	if (r == 0)
		r = svc_health_register(app.server, &app.ad);
	if (r == 0)
		r = svc_workspace_register(app.server, &app.ad);
	if (r == 0)
		r = svc_exec_register(app.server, &app.ad);
	if (r == 0)
		r = svc_devagent_register(app.server, &app.ad);
	if (r < 0) {
		wsb_err("cannot set up the server: %s", strerror(-r));
		return 1;
	}
	for (int i = 0; i < nlisten; i++) {
		r = strncmp(listen[i], "unix:", 5) == 0 ? unix_addr_in_use(listen[i]) : 0;
		if (r == 0) {
			r = rpc_server_listen(app.server, listen[i]);
			if (r == -EADDRINUSE)
				r = listen_error(listen[i]);
		}
		if (r < 0) {
			const char *why = strerror(-r);

			if (r == -EADDRINUSE)
				why = "address in use (is another agentd running?)";
			else if (r == -ENOTSOCK)
				why = "the path exists and is not a socket";
			wsb_err("cannot listen on '%s': %s", listen[i], why);
			return 1;
		}
	}
	r = rpc_server_start(app.server);
	if (r == 0 && app.stdio)
		r = stdio_serve_start(app.server, loop, on_stdio_eof, &app);
	if (r < 0) {
		wsb_err("cannot start the server: %s", strerror(-r));
		return 1;
	}
	for (int i = 0; i < nlisten; i++)
		wsb_notice("serving '%s' on %s%s", root, listen[i],
			   app.token ? " (token required)" : "");
	if (app.stdio)
		wsb_info("serving '%s' on stdin/stdout", root);

	/* A session's end is noticed within a quarter of its grace (at most
	 * 5 s). Unref'd: it never keeps the loop. */
	reap_ms = session_grace * 250 < 5000 ? session_grace * 250 : 5000;
	uv_timer_init(loop, &app.reap);
	app.reap.data = &app;
	uv_timer_start(&app.reap, on_reap, reap_ms, reap_ms);
	uv_unref((uv_handle_t *)&app.reap);

	uv_signal_init(loop, &app.sigterm);
	uv_signal_init(loop, &app.sigint);
	app.sigterm.data = app.sigint.data = &app;
	uv_signal_start(&app.sigterm, on_signal, SIGTERM);
	uv_signal_start(&app.sigint, on_signal, SIGINT);

	uv_run(loop, UV_RUN_DEFAULT);

	rpc_server_free(app.server);
	watch_free(svc_workspace_watcher());
	stdio_serve_stop();
	uv_run(loop, UV_RUN_DEFAULT); /* close callbacks */
	exec_table_free(app.ad.exec);
	uv_run(loop, UV_RUN_DEFAULT);
	fsops_handles_free(app.ad.handles);
	sessions_free(app.ad.sessions);
	close(app.ad.root.fd);
	free(app.token);
	r = uv_loop_close(loop);
	if (r < 0 && wsb_log_enabled(WSB_LOG_DEBUG))
		uv_walk(loop, log_open_handle, NULL);
	wsb_info("exiting");
	return 0;
}
