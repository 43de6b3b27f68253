/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * State shared by agentd's services, and the functions that register each
 * service's methods with the transport adapter (agentd/rpc.h).
 */
#ifndef AGENTD_AGENTD_H
#define AGENTD_AGENTD_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "resolve.h"
#include "rpc.h"

struct fsops_handles;
struct exec_table;

/** One agentd process. Filled in by main.c before services register. */
struct agentd {
	struct resolve_root root;      /**< the workspace root */
	const char *root_path;         /**< as given on the command line */
	uv_loop_t *loop;               /**< the loop thread's loop */
	struct fsops_handles *handles; /**< open-file handle table (fsops.c) */
	struct sessions *sessions;     /**< client sessions owning handles (session.c) */
	struct exec_table *exec;       /**< running commands (exec.c) */
	size_t view_limit;             /**< ViewFile size limit, bytes */
	unsigned max_handles;          /**< open handles limit */
	unsigned max_watches;          /**< directories watched at most; 0: the kernel's limit */
};

/** Default ViewFile limit: fits grpcio's default 4 MiB receive limit. */
#define AGENTD_VIEW_LIMIT_DEFAULT ((size_t)4 * 1024 * 1024 - 1024)

/**
 * Register the methods of wsbridge.v1.Workspace, wsbridge.v1.Exec,
 * ManageAgentOps and grpc.health.v1.Health. Each returns 0 or -errno (from
 * rpc_server_register). @p ad is borrowed and must outlive the server.
 */
int svc_workspace_register(struct rpc_server *s, struct agentd *ad);
int svc_exec_register(struct rpc_server *s, struct agentd *ad);
int svc_devagent_register(struct rpc_server *s, struct agentd *ad);
int svc_health_register(struct rpc_server *s, struct agentd *ad);
/**
 * rpc_server_config.on_call for agentd (@p arg: struct agentd *): a call
 * that names a session ("wsbridge-session") starts that session's grace
 * anew (sessions_touch()). Any thread.
 */
void svc_session_touch(struct rpc_call *call, void *arg);

/**
 * End the Watch streams opened with no_events (they end by nothing else) with
 * status OK, as watch_shutdown() ends the others. Loop thread; at shutdown.
 */
void svc_workspace_shutdown(void);

/**
 * Handler of /ManageAgentOps/ExecuteCommands (in svc_exec.c, registered by
 * svc_devagent.c as RPC_UNARY on RPC_ON_LOOP with data = struct agentd *).
 */
void svc_devagent_execute_commands(struct rpc_call *call, const ProtobufCMessage *req, void *data);

/**
 * Serve one connection over this process's stdin and stdout (--stdio, the
 * transport of `kubectl exec -i POD -- agentd --stdio`). stdin and stdout are
 * moved to private descriptors and fd 0 and 1 become /dev/null and stderr, so
 * nothing else can write into the transport. Two relay threads copy bytes
 * between them and a socketpair whose other end is given to @p s with
 * rpc_server_add_fd(). When stdin reaches EOF (the client is gone), @p on_eof
 * runs once on the loop thread. Call after rpc_server_start(), on the loop
 * thread. Returns 0 or -errno.
 */
int stdio_serve_start(struct rpc_server *s, uv_loop_t *loop, void (*on_eof)(void *arg), void *arg);

/**
 * Stop the relay threads and join them; call after the server shut down.
 * Closes the private descriptors. Loop thread. No-op if not started.
 */
void stdio_serve_stop(void);

#endif /* AGENTD_AGENTD_H */
