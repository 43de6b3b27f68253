/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * The "compile a file with many includes" workload of bench/fs.sh: a
 * translation unit that pulls in several hundred headers and defines almost
 * nothing, so that `cc -c` spends its time opening, stat-ing and reading
 * headers. bench/fs.sh compiles it with -nostdinc and -isystem pointing at the
 * copy of /usr/include untarred onto the file system under test, so every
 * header is read through that file system. Headers a machine lacks are
 * skipped (__has_include), which keeps the file portable; fs.sh reports how
 * many headers a compile opened.
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 35

/* C11 and POSIX */
#include <assert.h>
#include <complex.h>
#include <ctype.h>
#include <errno.h>
#include <fenv.h>
#include <float.h>
#include <inttypes.h>
#include <iso646.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdnoreturn.h>
#include <string.h>
#include <tgmath.h>
#include <threads.h>
#include <time.h>
#include <uchar.h>
#include <wchar.h>
#include <wctype.h>
#include <aio.h>
#include <arpa/inet.h>
#include <cpio.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <fmtmsg.h>
#include <fnmatch.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <iconv.h>
#include <langinfo.h>
#include <libgen.h>
#include <monetary.h>
#include <mqueue.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nl_types.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <regex.h>
#include <sched.h>
#include <search.h>
#include <semaphore.h>
#include <spawn.h>
#include <strings.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/times.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <syslog.h>
#include <tar.h>
#include <termios.h>
#include <ulimit.h>
#include <unistd.h>
#include <utime.h>
#include <utmpx.h>
#include <wordexp.h>

/* glibc and Linux extensions */
#include <argp.h>
#include <byteswap.h>
#include <elf.h>
#include <endian.h>
#include <err.h>
#include <error.h>
#include <execinfo.h>
#include <fts.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <link.h>
#include <malloc.h>
#include <mntent.h>
#include <obstack.h>
#include <pty.h>
#include <shadow.h>
#include <sys/auxv.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/statfs.h>
#include <sys/sysinfo.h>
#include <sys/timerfd.h>
#include <sys/user.h>
#include <sys/xattr.h>
#include <linux/audit.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <linux/ethtool.h>
#include <linux/fuse.h>
#include <linux/if_packet.h>
#include <linux/input.h>
#include <linux/netlink.h>
#include <linux/perf_event.h>
#include <linux/rtnetlink.h>
#include <linux/seccomp.h>
#include <linux/usb/ch9.h>
#include <linux/videodev2.h>

/* Libraries wsbridge builds against, and a few large ones, when installed */
#if __has_include(<grpc/grpc.h>)
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/byte_buffer_reader.h>
#endif
#if __has_include(<protobuf-c/protobuf-c.h>)
#include <protobuf-c/protobuf-c.h>
#endif
#if __has_include(<uv.h>)
#include <uv.h>
#endif
#if __has_include(<fuse3/fuse_lowlevel.h>)
#include <fuse3/fuse_lowlevel.h>
#endif
#if __has_include(<zlib.h>)
#include <zlib.h>
#endif
#if __has_include(<openssl/ssl.h>)
#include <openssl/ssl.h>
#include <openssl/evp.h>
#include <openssl/x509v3.h>
#endif
#if __has_include(<curl/curl.h>)
#include <curl/curl.h>
#endif
#if __has_include(<X11/Xlib.h>)
#include <X11/Xlib.h>
#include <X11/Xutil.h>
#endif

int many_includes_marker(void);

/* One symbol, so the object file is not empty. */
int many_includes_marker(void)
{
	return (int)sizeof(struct stat) + (int)sizeof(pthread_mutex_t);
}
