/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * Path resolution confined to the workspace root. Every path an RPC receives
 * goes through here; nothing else in agentd opens a path by name.
 *
 * A wire path is a byte string relative to the root. A leading "/" means the
 * root ("/a/b" == "a/b"); "", "." and "/" are the root itself. Resolution never
 * leaves the root: a ".." that climbs above it, an absolute symlink, or a
 * symlink whose target climbs out fails with -EXDEV (reported to clients as
 * PERMISSION_DENIED). Symlinks are followed only inside the root, and are
 * resolved on file descriptors, so a symlink swapped in during the call cannot
 * redirect it outside.
 *
 * Mechanism: openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS where the
 * kernel has it (Linux >= 5.6); otherwise (or under gVisor, which may lack it)
 * an equally strict component-by-component walk with O_PATH | O_NOFOLLOW,
 * reading each symlink with readlinkat(2), bounded at 40 links (ELOOP), as
 * path_resolution(7) describes.
 *
 * Thread safety: all functions may be called from any thread concurrently.
 */
#ifndef AGENTD_RESOLVE_H
#define AGENTD_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/** The workspace root. */
struct resolve_root {
	int fd;            /**< O_PATH|O_DIRECTORY fd of the root, owned by caller */
	bool use_openat2;  /**< false forces the portable walk (tests, gVisor) */
	/** Birth times and file handles name files here (struct
	 * fsops_ident): false on overlayfs, whose copy-up (any change of a
	 * lower file, or of a directory's entries) gives a file a new birth
	 * and handle under its old inode number. */
	bool idents;
	/** name_to_handle_at(2) works on the root (fsops_generation()):
	 * false without idents, where the file system has no file handles
	 * (EOPNOTSUPP; gVisor) and where a seccomp filter refuses it. */
	bool handles;
};

/**
 * Open the root directory @p path (absolute or relative to the cwd), probe
 * whether openat2 works, whether birth times and file handles name files
 * (statfs(2): not overlayfs) and whether the root has a file handle
 * (name_to_handle_at(2)). Returns 0 and fills @p root, or -errno (-ENOTDIR,
 * -ENOENT, ...). Close root->fd when done.
 */
int resolve_root_open(const char *path, struct resolve_root *root);

/**
 * Check and normalise a wire path: no NUL byte (-EINVAL), at most PATH_MAX
 * bytes (-ENAMETOOLONG), no component longer than NAME_MAX (-ENAMETOOLONG).
 * Leading slashes are dropped. On success returns 0 and sets *ret to a
 * malloc'd NUL-terminated relative path ("." for the root) that the caller
 * frees.
 */
int resolve_normalize(const void *path, size_t len, char **ret);

/**
 * Whether NUL-terminated path @p s has a ".." component. A caller that
 * creates the missing directories of a path (mkdir -p) refuses such a
 * path when some of them are missing: where ".." leads depends on what is
 * made first, and "new/../link" would make "new" before the walk meets a
 * symlink that leads out (which it then refuses), leaving "new" behind.
 */
bool resolve_has_dotdot(const char *s);

/**
 * Whether NUL-terminated relative path @p s climbs above its start by its
 * ".." components alone ("a/../../x"); symlinks are resolve_open()'s
 * business. Such a path is an escape (-EXDEV) whatever exists.
 */
bool resolve_climbs_out(const char *s);

/**
 * Open wire path @p path (@p len bytes) with open(2) @p flags and @p mode,
 * resolved beneath the root. A final symlink is followed (inside the root)
 * unless @p flags has O_NOFOLLOW. O_CLOEXEC is always added. O_CREAT works
 * as with openat(2). Returns the new fd (>= 0) or -errno: -EXDEV for an
 * escape, else as open(2) reports.
 */
int resolve_open(const struct resolve_root *root, const void *path, size_t len, int flags,
		 mode_t mode);

/**
 * Resolve everything but the last component of @p path: returns in
 * *ret_dirfd an O_PATH|O_DIRECTORY fd of the parent (the caller closes it)
 * and in *ret_name a malloc'd copy of the last component (the caller frees
 * it), for use with the *at(2) calls and AT_SYMLINK_NOFOLLOW. Returns 0 or
 * -errno: -EXDEV for an escape, -EBUSY when @p path is the root itself (it has
 * no parent here), -EINVAL when the last component is "." or "..".
 */
int resolve_parent(const struct resolve_root *root, const void *path, size_t len,
		   int *ret_dirfd, char **ret_name);

/** resolve_parent_ex() flag: a trailing "/" may name a missing entry (one
 * that the call makes a directory: mkdir(2), rename(2) of a directory). */
#define RESOLVE_PARENT_NEW_DIR 1u

/**
 * resolve_parent() with a trailing "/" checked as path_resolution(7) has
 * it: a path that ends in "/" names a directory. When @p path does, the
 * last component must be a directory that exists (not a symlink to one:
 * the *at(2) calls act on the link), or, with #RESOLVE_PARENT_NEW_DIR,
 * be missing; else -ENOTDIR (it is something else) or -ENOENT (it is
 * missing), as unlink(2), rmdir(2), rename(2), link(2), symlink(2) and
 * mknod(2) report. resolve_parent() is this with @p flags 0.
 */
int resolve_parent_ex(const struct resolve_root *root, const void *path, size_t len,
		      unsigned flags, int *ret_dirfd, char **ret_name);

/** Whether wire path @p path (@p len bytes) ends in "/" after a component
 * (the root's own "/" does not count). */
bool resolve_trailing_slash(const void *path, size_t len);

#endif /* AGENTD_RESOLVE_H */
