/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * File operations on the workspace, without gRPC: what the
 * wsbridge.v1.Workspace service (proto/wsbridge.proto) and ManageAgentOps
 * need. Every path is a wire path (bytes + length, relative to the root) and
 * goes through resolve.h, so nothing here reaches outside the root; a final
 * symlink is never followed unless the function says so.
 *
 * Return convention: 0 (or a count >= 0) on success, -errno on failure, the
 * errno being what the underlying system call gave (named in each comment),
 * plus -EXDEV for a path that escapes the root.
 *
 * Modes given to the create functions are applied exactly: the process umask
 * is undone with a chmod after creation (the FUSE client applies the caller's
 * umask itself).
 *
 * Open files are kept in a handle table (struct fsops_handles): ids are
 * random nonzero 64-bit numbers (getrandom(2)), unique among the table's
 * handles, so that one client's ids say nothing of another's.
 * Each handle has an owner: the key of the client session it was opened
 * under (session.h), or 0 for none; fsops_handles_release_owner() releases
 * a session's handles when it ends.
 *
 * Thread safety: every function may be called from any thread concurrently
 * (the cq threads do), except that one struct fsops_upload or fsops_download
 * must be used by one thread at a time.
 */
#ifndef AGENTD_FSOPS_H
#define AGENTD_FSOPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>

#include "resolve.h"

/** Largest Read/Write/Upload/Download chunk, bytes (proto: "at most 1 MiB"). */
#define FSOPS_CHUNK_MAX ((size_t)1024 * 1024)
/** Largest xattr value and name list, bytes (XATTR_SIZE_MAX, XATTR_LIST_MAX). */
#define FSOPS_XATTR_MAX ((size_t)64 * 1024)
/** ReadDir page size when the client asks for 0, and the cap, entries. */
#define FSOPS_READDIR_DEFAULT 1024u
#define FSOPS_READDIR_MAX 4096u
/** Default handle-table limit (agentd --max-handles), handles. */
#define FSOPS_MAX_HANDLES_DEFAULT 4096u

/* ---- handle table ---- */

struct fsops_handles;

/**
 * What names one file beyond its inode number, which a file system hands
 * to the next file it makes once freed (ext4 at once): Attr.btime_ns and
 * Attr.generation. Zeros where unknown; both zero on overlayfs
 * (resolve_root.idents).
 */
struct fsops_ident {
	int64_t btime_ns;    /**< birth time, ns since the epoch (fsops_birth()) */
	uint64_t generation; /**< hash of its file handle (fsops_generation()) */
};

/**
 * Create a handle table that holds at most @p max open handles (0 means
 * FSOPS_MAX_HANDLES_DEFAULT). Returns 0 and sets *ret, or -ENOMEM.
 */
int fsops_handles_new(unsigned max, struct fsops_handles **ret);

/**
 * Close every handle still open and free the table. No call may use the table
 * concurrently or afterwards. NULL is a no-op.
 */
void fsops_handles_free(struct fsops_handles *h);

/**
 * Release every handle of owner @p owner (nonzero; 0 releases nothing), as
 * fsops_release() would each: a call using one finishes first. Returns how
 * many were released.
 */
unsigned fsops_handles_release_owner(struct fsops_handles *h, uint64_t owner);

/** Number of open handles now, and the table's limit. */
unsigned fsops_handles_count(struct fsops_handles *h);
unsigned fsops_handles_limit(const struct fsops_handles *h);
/** Of the open handles, those of no session (owner 0), which may take half
 * the table at most (fsops_open(): -EMFILE past it). Any thread. */
unsigned fsops_handles_unowned(struct fsops_handles *h);

/**
 * open(2) @p path, as a new handle of owner @p owner (0: none), with @p flags
 * (O_RDONLY/O_WRONLY/O_RDWR, optionally O_CREAT, O_EXCL, O_TRUNC, O_APPEND,
 * O_NOFOLLOW, O_DIRECTORY; anything else is -EINVAL) and, for a created file,
 * permission bits @p mode (exactly, umask not applied). The fd is opened
 * O_NONBLOCK so that a FIFO cannot hang the calling thread. On success stores
 * a new handle id in *ret_handle and the fstat(2) of the file in *ret_st (may
 * be NULL), what names it in *ret_ident (may be NULL; fsops_stat()'s
 * rule, the birth time from the same statx(2)), and in *ret_created (may be
 * NULL) whether this call created the file (O_CREAT without O_EXCL opens an
 * existing one: false). Errors: as open(2); -EXDEV (escape); -EMFILE when the table is full
 * (fsops_handles_count() == fsops_handles_limit()), when @p owner is 0 and
 * half of it holds handles of no session (fsops_handles_unowned()), or the
 * process is out of fds.
 */
int fsops_open(const struct resolve_root *root, struct fsops_handles *h, uint64_t owner,
	       const void *path, size_t len, int flags, mode_t mode, uint64_t *ret_handle,
	       struct stat *ret_st, struct fsops_ident *ret_ident, bool *ret_created);

/**
 * Open anew the file that handle @p id has open, as open(2) of its
 * /proc/self/fd link would (proc(5)): the same inode even after every name
 * of it was unlinked or renamed over, with @p flags (O_RDONLY/O_WRONLY/
 * O_RDWR, optionally O_TRUNC, O_APPEND; anything else is -EINVAL) and the
 * permission checks of an open. No path is resolved. On success stores the
 * new handle's id (owner @p owner, 0: none) in *ret_handle and its
 * fstat(2) in *ret_st (may be NULL).
 * Errors: -EBADF for an unknown id; -EMFILE as fsops_open(); else as
 * open(2) (-EACCES, -EISDIR, -ENXIO for a FIFO without a reader, ...).
 */
int fsops_reopen(struct fsops_handles *h, uint64_t owner, uint64_t id, int flags,
		 uint64_t *ret_handle, struct stat *ret_st);

/**
 * lstat(2) of @p path (@p len bytes) as fsops_stat() does, and for a
 * regular file keep the O_PATH descriptor that stat was taken through as
 * a handle (owner @p owner, 0: none), read-only where agentd may read the
 * file (gVisor reopens no O_PATH descriptor of a file without a name),
 * whose id goes to *ret_handle (0 for any other kind of file, or past
 * three quarters of the table, as fsops_rename_keep(): no error here):
 * fsops_reopen() of it later opens the very file the stat described,
 * whatever the name holds by then (a local path walk opens the inode
 * its lookup found, path_openat()). The handle holds the file (and its
 * blocks, unlinked) until fsops_release(); Write of it fails -EBADF.
 * Returns 0 or -errno as fsops_stat(). Any thread.
 */
int fsops_pin(const struct resolve_root *root, struct fsops_handles *h, uint64_t owner,
	      const void *path, size_t len, uint64_t *ret_handle, struct stat *ret_st,
	      struct fsops_ident *ret_ident);

/**
 * Remove handle @p id from the table and close its fd once no call is using
 * it any more (a Read in flight finishes first). Returns 0, or -EBADF for an
 * unknown id.
 */
int fsops_release(struct fsops_handles *h, uint64_t id);

/**
 * pread(2) up to @p size bytes at byte @p offset of handle @p id into @p buf,
 * looping over short reads: fewer than @p size bytes only at end of file.
 * Returns the byte count, or -EBADF (unknown id), -EINVAL (offset beyond
 * INT64_MAX), -EISDIR, ... as pread(2).
 */
ssize_t fsops_read(struct fsops_handles *h, uint64_t id, uint64_t offset, void *buf, size_t size);

/**
 * Clear S_ISUID, and S_ISGID where S_IXGRP is set, of the regular file
 * handle @p id has open (wsb_suidgid_kill_bits()), as a write, truncate or
 * open(O_TRUNC) by a process without CAP_FSETID does: agentd may have that
 * capability, the client's writer (FUSE_WRITE_KILL_SUIDGID and its kin)
 * had not. Returns 1 when it cleared bits, 0 when there were none, or
 * -errno (-EBADF for an unknown id; fchmod(2)'s, -EPERM when agentd owns
 * neither the file nor CAP_FOWNER). Any thread.
 */
int fsops_kill_suidgid(struct fsops_handles *h, uint64_t id);

/**
 * Write @p len bytes of @p data at byte @p offset of handle @p id: pwrite(2),
 * or write(2) at the end of the file for a handle opened with O_APPEND
 * (offset ignored). Loops over short writes. Returns the byte count written
 * (== len) and the fstat(2) afterwards in *ret_st (may be NULL), or -errno as
 * write(2) (-ENOSPC, -EFBIG, -EBADF for an unknown id or a read-only handle).
 */
ssize_t fsops_write(struct fsops_handles *h, uint64_t id, uint64_t offset, const void *data,
		    size_t len, struct stat *ret_st);

/** fsync(2), or fdatasync(2) when @p datasync, on handle @p id. */
int fsops_fsync(struct fsops_handles *h, uint64_t id, bool datasync);

/**
 * fallocate(2) on handle @p id: @p fl is an OR of FALLOC_FL_KEEP_SIZE,
 * FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE (anything else -EINVAL), byte
 * range @p offset, @p length. Errors as fallocate(2).
 */
int fsops_fallocate(struct fsops_handles *h, uint64_t id, int fl, uint64_t offset, uint64_t length);

/**
 * lseek(2) with SEEK_DATA or SEEK_HOLE (@p whence) from byte @p offset on
 * handle @p id; the result in *ret_offset. -ENXIO past the end (lseek(2)).
 */
int fsops_lseek(struct fsops_handles *h, uint64_t id, uint64_t offset, int whence,
		uint64_t *ret_offset);

/** Most bytes one fsops_copy_file_range call copies (1 GiB): bounds the time
 * one call keeps a completion-queue thread busy, as MAX_RW_COUNT bounds one
 * read(2) in Linux. A caller wanting more continues at offset + copied. */
#define FSOPS_COPY_MAX ((uint64_t)1 << 30)

/**
 * Copy up to @p len bytes from byte @p off_in of handle @p id_in to byte
 * @p off_out of handle @p id_out inside agentd, with copy_file_range(2) and
 * explicit offsets (the handles' file offsets are not used or moved). Loops
 * until @p len bytes or end of file; where the file system or sandbox lacks
 * it (EXDEV, EINVAL, ENOSYS, EOPNOTSUPP: other file systems, gVisor) it goes
 * on with pread(2)/pwrite(2) in FSOPS_CHUNK_MAX steps. At most
 * FSOPS_COPY_MAX bytes per call. On success stores the byte count in
 * *ret_copied: less than @p len at end of file or past FSOPS_COPY_MAX; a
 * failure after some bytes were copied is reported as that short count.
 * Errors (copy_file_range(2)): -EBADF (unknown id, input not readable,
 * output not writable or opened O_APPEND), -EISDIR, -EINVAL (not regular
 * files, an offset beyond INT64_MAX, overlapping ranges of one file),
 * -ENOSPC, -EFBIG, -EIO. Any thread.
 */
int fsops_copy_file_range(struct fsops_handles *h, uint64_t id_in, uint64_t off_in,
			  uint64_t id_out, uint64_t off_out, uint64_t len, uint64_t *ret_copied);

/**
 * fstat(2) of handle @p id. Returns 0 or -EBADF.
 */
int fsops_fstat(struct fsops_handles *h, uint64_t id, struct stat *ret_st);

/* ---- path operations ---- */

/**
 * stat(2) (@p follow, the final symlink followed inside the root) or
 * lstat(2), into @p ret_st, and what names the file into @p ret_ident (may
 * be NULL): its birth time (fsops_birth()) and generation
 * (fsops_generation()), zeros unless @p root->idents. Returns 0 or -errno.
 */
int fsops_stat(const struct resolve_root *root, const void *path, size_t len, bool follow,
	       struct stat *ret_st, struct fsops_ident *ret_ident);

/**
 * fstatat(2) of (@p dirfd, @p name) with @p flags (AT_SYMLINK_NOFOLLOW,
 * AT_EMPTY_PATH) into @p ret_st, through statx(2), which also gives the
 * birth time: into @p ret_btime_ns (ns since the epoch; 0 when the file
 * system keeps none, statx(2) STATX_BTIME, or a seccomp filter refuses
 * statx(2): then fstatat(2)). Returns 0 or -errno. Any thread.
 */
int fsops_birth(int dirfd, const char *name, int flags, struct stat *ret_st,
		int64_t *ret_btime_ns);

/**
 * The generation of (@p dirfd, @p name) with @p flags (fsops_birth()'s): a
 * 64-bit FNV-1a hash of its name_to_handle_at(2) file handle, never 0, or 0
 * when the file system gives none (EOPNOTSUPP; gVisor), a seccomp filter
 * refuses the call, or it fails.
 * The handle names one file for the life of the file system (it is what
 * NFS hands out; ext4, xfs and tmpfs put the inode number and a random
 * generation number in it, new each time the number is given out), so
 * with the inode number it tells apart files that share a reused number
 * and were born within one tick of the kernel's coarse file clock, which
 * birth times cannot. About 3 µs here, against statx(2)'s 2 µs. Any thread.
 */
uint64_t fsops_generation(int dirfd, const char *name, int flags);

/**
 * What names the file that handle @p id has open (stat_ident(): one
 * statx(2) and one name_to_handle_at(2)) into *@p ret; zeros when
 * @p root->idents is false or there is no such handle. Any thread.
 */
void fsops_fident(const struct resolve_root *root, struct fsops_handles *h, uint64_t id,
		  struct fsops_ident *ret);

/** One ReadDir entry. */
struct fsops_dirent {
	char *name;          /**< malloc'd, NUL-terminated (names hold no NUL) */
	size_t name_len;     /**< bytes */
	bool has_attr;       /**< false: the entry vanished before lstat */
	struct stat st;      /**< lstat(2) of the entry when has_attr */
	struct fsops_ident ident; /**< what names it (fsops_stat()'s rule) */
	int64_t next_offset; /**< d_off cookie: pass as offset to resume after */
};

/**
 * List directory @p path (following a final symlink inside the root, unless
 * @p oflags has O_NOFOLLOW: then a symlink fails -ENOTDIR, as open(2) with
 * O_DIRECTORY | O_NOFOLLOW) from cookie @p offset (0 = the start; else a
 * next_offset from an earlier page), at most @p max entries (0 =
 * FSOPS_READDIR_DEFAULT; capped at FSOPS_READDIR_MAX), never "." or "..",
 * using getdents64(2) and the d_off cookies the file system gives. Returns 0 with a malloc'd array in
 * *ret_ents of *ret_n entries (free with fsops_dirents_free) and *ret_eof
 * true when the directory has no more entries. With @p ret_self (may be
 * NULL), the directory's own attributes after the listing (getdents(2)
 * may have set its atime: relatime, mount(8)) go into its st and ident,
 * with has_attr false if that stat failed; its name is NULL. Errors:
 * -ENOTDIR, -ENOENT, -EINVAL (bad cookie, from lseek(2)), -EXDEV.
 */
int fsops_readdir(const struct resolve_root *root, const void *path, size_t len, int oflags,
		  int64_t offset, unsigned max, struct fsops_dirent **ret_ents, size_t *ret_n,
		  bool *ret_eof, struct fsops_dirent *ret_self);

/** Free what fsops_readdir returned. NULL is a no-op. */
void fsops_dirents_free(struct fsops_dirent *ents, size_t n);

/** Which fields of struct fsops_setattr to apply (proto SetAttrRequest.Valid). */
enum {
	FSOPS_SET_MODE = 1,
	FSOPS_SET_UID = 2,
	FSOPS_SET_GID = 4,
	FSOPS_SET_SIZE = 8,
};

struct fsops_setattr {
	unsigned valid;       /**< OR of FSOPS_SET_* */
	/** As fsops_kill_suidgid(), after the size if any, before the rest;
	 *  its failure fails nothing (only the bits are at stake). */
	bool kill_suidgid;
	mode_t mode;          /**< permission bits (07777) */
	uid_t uid;
	gid_t gid;
	uint64_t size;        /**< bytes */
	struct timespec atime; /**< tv_nsec may be UTIME_NOW or UTIME_OMIT */
	struct timespec mtime;
};

/**
 * chmod/chown/truncate/utimensat, in the order size, mode, owner, times, on
 * the file at @p path (a final symlink is never followed: the symlink itself
 * is changed; chmod of a symlink is -EOPNOTSUPP, truncate -EINVAL) or, when
 * @p id is nonzero, on that handle's file (@p path ignored). Stops at the
 * first failure (earlier changes stay). On success the fstat(2) afterwards
 * in *ret_st (may be NULL). Errors: as truncate(2)/chmod(2)/lchown(2)/
 * utimensat(2); -EISDIR for the size of a directory.
 */
int fsops_setattr(const struct resolve_root *root, struct fsops_handles *h, const void *path,
		  size_t len, uint64_t id, const struct fsops_setattr *sa, struct stat *ret_st);

/**
 * mkdir(2) with permission bits @p mode (exact); lstat in *ret_st and
 * what names it in *ret_ident (each may be NULL; fsops_stat()'s rule).
 */
int fsops_mkdir(const struct resolve_root *root, const void *path, size_t len, mode_t mode,
		struct stat *ret_st, struct fsops_ident *ret_ident);

/**
 * mknod(2) for S_IFIFO, S_IFSOCK or S_IFREG (type 0 means regular) with the
 * permission bits of @p mode; device nodes (S_IFCHR, S_IFBLK) are -EPERM,
 * other types -EINVAL. lstat in *ret_st and what names it in
 * *ret_ident (each may be NULL; fsops_stat()'s rule).
 */
int fsops_mknod(const struct resolve_root *root, const void *path, size_t len, mode_t mode,
		struct stat *ret_st, struct fsops_ident *ret_ident);

/**
 * unlink(2) of @p path (@p len bytes). With @p ret_st, a regular file or a
 * symlink that other names keep is held across the unlink and its fstat(2) after it (its
 * nlink and ctime changed) goes to *@p ret_st: 1 is returned then, 0 when
 * the last name went, or when the file was replaced between the look and
 * the unlink (the attributes are then of the file the name held a moment
 * before; the watch reports such a change). -errno on failure; the root
 * itself is -EBUSY. Any thread.
 */
int fsops_unlink(const struct resolve_root *root, const void *path, size_t len,
		 struct stat *ret_st);

/**
 * rmdir(2) of @p path (@p len bytes). With @p ret_st, the directory's
 * attributes once removed (nlink 0, the new ctime), as fstat(2) of a
 * descriptor open on it gives them, go to *@p ret_st: 1 is returned then, 0
 * when they could not be had (the name held another directory a moment
 * before). -errno on failure; the root itself is -EBUSY. Any thread.
 */
int fsops_rmdir(const struct resolve_root *root, const void *path, size_t len,
		struct stat *ret_st);

/**
 * renameat2(2) @p from to @p to with @p flags 0, RENAME_NOREPLACE or
 * RENAME_EXCHANGE. Neither name's final symlink is followed.
 */
int fsops_rename(const struct resolve_root *root, const void *from, size_t from_len,
		 const void *to, size_t to_len, unsigned flags);

/**
 * fsops_rename(), and when it replaces a regular file (flags 0) and @p h
 * stays at most three quarters full with it, keep that file open (read-only, or O_PATH
 * where agentd may not read it) as a new handle of @p h of owner @p owner: its id in
 * *ret_kept and its fstat(2) after the rename (nlink 0 if that was its last
 * name) in *ret_st; else *ret_kept is 0. The handle opens the file again
 * with fsops_reopen() and goes with fsops_release(). When it replaces a
 * directory (flags 0) and @p ret_st is given, that directory's attributes
 * once replaced (nlink 0, the new ctime), as fstat(2) of a descriptor open
 * on it gives them, go to *@p ret_st and 1 is returned (*ret_kept 0);
 * else 0. Errors as fsops_rename(); keeping never fails it.
 */
int fsops_rename_keep(const struct resolve_root *root, struct fsops_handles *h,
		      uint64_t owner, const void *from, size_t from_len, const void *to, size_t to_len,
		      unsigned flags, uint64_t *ret_kept, struct stat *ret_st);

/**
 * linkat(2) without AT_SYMLINK_FOLLOW; lstat of the new name in *ret_st and
 * what names it in *ret_ident (each may be NULL; fsops_stat()'s rule).
 */
int fsops_link(const struct resolve_root *root, const void *from, size_t from_len,
	       const void *to, size_t to_len, struct stat *ret_st, struct fsops_ident *ret_ident);

/**
 * symlinkat(2): @p target (@p target_len bytes, stored as given, never
 * resolved; NUL -> -EINVAL, empty -> -ENOENT, >= PATH_MAX -> -ENAMETOOLONG)
 * at @p path. lstat in *ret_st and what names it in *ret_ident (each
 * may be NULL; fsops_stat()'s rule).
 */
int fsops_symlink(const struct resolve_root *root, const void *target, size_t target_len,
		  const void *path, size_t len, struct stat *ret_st, struct fsops_ident *ret_ident);

/**
 * readlink(2): a malloc'd copy of the target (NUL-terminated, caller frees)
 * in *ret and its length in bytes in *ret_len. -EINVAL if not a symlink.
 */
int fsops_readlink(const struct resolve_root *root, const void *path, size_t len, char **ret,
		   size_t *ret_len);

/** fstatvfs(2) of the file system holding @p path (followed). */
int fsops_statfs(const struct resolve_root *root, const void *path, size_t len,
		 struct statvfs *ret);

/*
 * The xattr calls act on the file at @p path (@p len bytes; a final
 * symlink itself, never its target) or, when @p id is nonzero, on that
 * handle's file (@p path ignored; -EBADF for no such handle), as
 * fgetxattr(2) and the like on an open file: the file opened, though its
 * name was unlinked or now holds another.
 */

/**
 * lgetxattr(2): the value of attribute @p name (@p name_len bytes; NUL or
 * empty or > 255 bytes -> -EINVAL/-ERANGE) in a malloc'd buffer *ret (caller
 * frees; non-NULL even when empty), *ret_len bytes. -ENODATA when absent.
 */
int fsops_getxattr(const struct resolve_root *root, struct fsops_handles *h, const void *path,
		   size_t len, uint64_t id, const void *name, size_t name_len, void **ret,
		   size_t *ret_len);

/**
 * lsetxattr(2) with @p flags 0, XATTR_CREATE, XATTR_REPLACE or both (the
 * file system then fails a missing name ENODATA, an existing one EEXIST;
 * other bits are -EINVAL). A value over
 * FSOPS_XATTR_MAX bytes is -E2BIG.
 */
int fsops_setxattr(const struct resolve_root *root, struct fsops_handles *h, const void *path,
		   size_t len, uint64_t id, const void *name, size_t name_len, const void *value,
		   size_t value_len, int flags);

/**
 * llistxattr(2): the names as one malloc'd buffer of NUL-terminated names
 * (*ret, *ret_len bytes including the NULs; caller frees).
 */
int fsops_listxattr(const struct resolve_root *root, struct fsops_handles *h, const void *path,
		    size_t len, uint64_t id, char **ret, size_t *ret_len);

/** lremovexattr(2). -ENODATA when absent. */
int fsops_removexattr(const struct resolve_root *root, struct fsops_handles *h, const void *path,
		      size_t len, uint64_t id, const void *name, size_t name_len);

/* ---- whole-file transfer ---- */

struct fsops_upload;

/** Options of fsops_upload_begin (proto UploadHeader). */
struct fsops_upload_opts {
	mode_t mode;        /**< permission bits; 0 means 0644 unless mode_set */
	bool mode_set;      /**< mode is meant as it is, 0 too */
	bool mkdirs;        /**< create missing parent directories (0755) */
	bool exclusive;     /**< fail with -EEXIST if the target exists */
	uint64_t size_hint; /**< bytes expected; -ENOSPC early if they cannot fit */
	bool keep_mode;     /**< a regular file at the target keeps its rwx bits (0777) */
	bool follow;        /**< a symlink at the target is followed (-ENOENT: dangling) */
};

/**
 * Start writing @p path atomically: creates a temp file
 * ".wsb-upload.XXXXXX" (O_CREAT|O_EXCL, mode 0600) in the target's
 * directory; nothing is visible at @p path until fsops_upload_commit.
 * Returns 0 and *ret (owned by the caller, ended by exactly one of commit or
 * abort), or -errno: -EXDEV, -ENOENT (parent missing and !mkdirs), -EEXIST
 * (exclusive and the target exists), -EISDIR (target is a directory),
 * -ENOSPC (size_hint larger than the free space), -EBUSY (the root).
 */
int fsops_upload_begin(const struct resolve_root *root, const void *path, size_t len,
		       const struct fsops_upload_opts *opts, struct fsops_upload **ret);

/** Append @p len bytes of @p data. -ENOSPC, -EFBIG, -EIO as write(2). */
int fsops_upload_write(struct fsops_upload *u, const void *data, size_t len);

/** Append a run of @p len zero bytes as a hole (nothing is written). */
int fsops_upload_hole(struct fsops_upload *u, uint64_t len);

/** Bytes of file content so far (data plus holes). */
uint64_t fsops_upload_size(const struct fsops_upload *u);

/**
 * First half of the commit: set the final size (trailing holes), chmod to
 * the mode, fsync(2) the temp file. Nothing is visible at the target yet, so
 * the caller may still abort (fsops_upload_abort) after this, for example
 * when it learns meanwhile that its client went away. Returns 0 or -errno
 * (-ENOSPC, -EIO); @p u stays owned by the caller either way. Optional:
 * fsops_upload_commit does it if it was not done.
 */
int fsops_upload_sync(struct fsops_upload *u);

/**
 * Finish: set the final size (trailing holes), chmod to the mode, fsync(2),
 * rename over the target (renameat2 RENAME_NOREPLACE, or link(2) where the
 * file system lacks it, when exclusive), fsync the directory. Frees @p u
 * in every case; on failure the temp file is removed. Returns 0 and the
 * fstat(2) of the new file in *ret_st (may be NULL), or -errno (-EEXIST,
 * -ENOSPC, -EIO, -EISDIR).
 */
int fsops_upload_commit(struct fsops_upload *u, struct stat *ret_st);

/** Abandon the upload: remove the temp file, free @p u. NULL is a no-op. */
void fsops_upload_abort(struct fsops_upload *u);

/**
 * Create directories for every missing parent of @p path (mode 0755, like
 * mkdir -p), each resolved inside the root. Returns 0 or -errno (-EXDEV,
 * -ENOTDIR when a parent is a file, ...).
 */
int fsops_mkdirs(const struct resolve_root *root, const void *path, size_t len);

/**
 * Write @p path with @p data_len bytes of @p data atomically, through the
 * upload path (temp file, fsync, rename); mode and mkdirs from @p opts (may
 * be NULL: 0644, no mkdirs). Returns 0 or -errno as the upload calls.
 */
int fsops_write_file(const struct resolve_root *root, const void *path, size_t len,
		     const void *data, size_t data_len, const struct fsops_upload_opts *opts);

/**
 * Read regular file @p path (followed inside the root) whole, if it has at
 * most @p limit bytes. Returns 0 with a malloc'd buffer *ret (one extra NUL
 * byte at the end, not counted) of *ret_len bytes, or -EISDIR, -EINVAL (not
 * a regular file), -EFBIG (larger than @p limit), -EWOULDBLOCK (a process
 * holds a lease on it, fcntl(2) F_SETLEASE: agentd does not wait for it to
 * be broken), -ENOENT, -EXDEV, ...
 */
int fsops_read_file(const struct resolve_root *root, const void *path, size_t len, size_t limit,
		    char **ret, size_t *ret_len);

struct fsops_download;

/**
 * Start reading regular file @p path (followed inside the root) from byte
 * @p offset for @p length bytes (0 = to the end of the file as it is now).
 * Returns 0, *ret (free with fsops_download_free) and the fstat(2) in
 * *ret_st (may be NULL), or -EISDIR, -EINVAL (not a regular file),
 * -EWOULDBLOCK (leased, as fsops_read_file()), -ENOENT...
 */
int fsops_download_begin(const struct resolve_root *root, const void *path, size_t len,
			 uint64_t offset, uint64_t length, struct stat *ret_st,
			 struct fsops_download **ret);

/**
 * The next piece: up to @p size bytes of data into @p buf (the return value,
 * bytes), followed by a hole of *ret_hole zero bytes that are not sent (found
 * with lseek SEEK_DATA/SEEK_HOLE; on file systems without them everything is
 * data). Returns 0 with *ret_hole 0 at the end. -errno from pread(2).
 */
ssize_t fsops_download_next(struct fsops_download *d, void *buf, size_t size, uint64_t *ret_hole);

/** Close and free. NULL is a no-op. */
void fsops_download_free(struct fsops_download *d);

#endif /* AGENTD_FSOPS_H */
