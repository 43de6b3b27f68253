/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * --stdio: one gRPC connection carried over stdin and stdout. gRPC needs one
 * bidirectional non-blocking socket, while `kubectl exec -i` gives two pipes,
 * so two blocking relay threads copy stdin -> socket and socket -> stdout.
 * They are woken for shutdown through a pipe in poll(2), never with
 * pthread_cancel (grpc-c-core.md §5: it trips ASan at thread exit).
 *
 * Threads: stdio_serve_start/stop on the loop thread; the relays on their own.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agentd.h"
#include "wsb.h"

#define RELAY_BUF (256 * 1024)

struct relay {
	int in, out;        /* copy from in to out */
	bool shut_wr;       /* on EOF, shutdown(out, SHUT_WR) instead of close */
	pthread_t thread;
	bool running;
};

static struct {
	bool started;
	int wake[2];        /* write a byte to stop both relays */
	int sock;           /* our end of the socketpair */
	int in_fd, out_fd;  /* the private copies of stdin and stdout */
	struct relay up, down;
	uv_async_t eof_async;
	void (*on_eof)(void *);
	void *arg;
} st = {.wake = {-1, -1}, .sock = -1, .in_fd = -1, .out_fd = -1};

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				struct pollfd pf = {.fd = fd, .events = POLLOUT};
				struct pollfd pw = {.fd = st.wake[0], .events = POLLIN};
				struct pollfd fds[2] = {pf, pw};
				if (poll(fds, 2, -1) < 0 && errno != EINTR)
					return -errno;
				if (fds[1].revents)
					return -ECANCELED;
				continue;
			}
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	char *buf = malloc(RELAY_BUF);

	while (buf) {
		struct pollfd fds[2] = {
			{.fd = r->in, .events = POLLIN},
			{.fd = st.wake[0], .events = POLLIN},
		};
		ssize_t n;

		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (fds[1].revents) {
			/* Stopping: pass on what gRPC already wrote. */
			while (!r->shut_wr &&
			       (n = recv(r->in, buf, RELAY_BUF, MSG_DONTWAIT)) > 0)
				if (write_all(r->out, buf, (size_t)n) < 0)
					break;
			break;
		}
		n = read(r->in, buf, RELAY_BUF);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break;
		if (write_all(r->out, buf, (size_t)n) < 0)
			break;
	}
	free(buf);
	if (r->shut_wr) {
		/* stdin ended: the peer is gone. Tell gRPC and the loop. */
		shutdown(r->out, SHUT_WR);
		uv_async_send(&st.eof_async);
	}
	return NULL;
}

static void on_eof_async(uv_async_t *h)
{
	if (st.on_eof) {
		void (*cb)(void *) = st.on_eof;
		st.on_eof = NULL;
		cb(st.arg);
	}
}

int stdio_serve_start(struct rpc_server *s, uv_loop_t *loop, void (*on_eof)(void *), void *arg)
{
	int sv[2], devnull, r;

	st.in_fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
	st.out_fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
	if (st.in_fd < 0 || st.out_fd < 0)
		return -errno;
	/* Keep fd 0 and 1 valid but out of the transport. */
	devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0)
		return -errno;
	if (dup2(devnull, STDIN_FILENO) < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
		r = -errno;
		close(devnull);
		return r;
	}
	close(devnull);
	if (pipe2(st.wake, O_CLOEXEC) < 0)
		return -errno;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	st.sock = sv[0];
	r = rpc_server_add_fd(s, sv[1]);
	if (r < 0) {
		close(sv[1]);
		return r;
	}
	st.on_eof = on_eof;
	st.arg = arg;
	uv_async_init(loop, &st.eof_async, on_eof_async);
	st.up = (struct relay){.in = st.in_fd, .out = st.sock, .shut_wr = true};
	st.down = (struct relay){.in = st.sock, .out = st.out_fd, .shut_wr = false};
	if ((r = pthread_create(&st.up.thread, NULL, relay_main, &st.up)) != 0)
		return -r;
	st.up.running = true;
	if ((r = pthread_create(&st.down.thread, NULL, relay_main, &st.down)) != 0)
		return -r;
	st.down.running = true;
	st.started = true;
	return 0;
}

void stdio_serve_stop(void)
{
	if (!st.started)
		return;
	(void)!write(st.wake[1], "x", 1);
	if (st.up.running)
		pthread_join(st.up.thread, NULL);
	if (st.down.running)
		pthread_join(st.down.thread, NULL);
	uv_close((uv_handle_t *)&st.eof_async, NULL);
	close(st.sock);
	close(st.in_fd);
	close(st.out_fd);
	close(st.wake[0]);
	close(st.wake[1]);
	st.started = false;
}
