/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file
 * grpc.health.v1.Health/Check (grpc/grpc doc/health-checking.md), for
 * Kubernetes gRPC probes, which cannot send a token: it is served without
 * authentication and tells nothing but whether agentd serves. Watch is not
 * registered, so it answers UNIMPLEMENTED. Runs on a cq thread.
 */
#include <string.h>

#include "agentd.h"
#include "health.pb-c.h"
#include "wsb.h"

static const char *const served[] = {
	"", "wsbridge.v1.Workspace", "wsbridge.v1.Exec", "ManageAgentOps", "grpc.health.v1.Health",
};

static void do_check(struct rpc_call *call, const ProtobufCMessage *msg, void *data)
{
	const Grpc__Health__V1__HealthCheckRequest *req = (const void *)msg;
	Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

	for (size_t i = 0; i < sizeof(served) / sizeof(served[0]); i++) {
		if (strcmp(req->service, served[i]) == 0) {
			resp.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
			rpc_reply(call, &resp.base);
			return;
		}
	}
	/* The health protocol: an unknown service is NOT_FOUND. */
	rpc_finish(call, WSB_NOT_FOUND, 0, "unknown service '%.200s'", req->service);
}

static const struct rpc_method health_check = {
	.path = "/grpc.health.v1.Health/Check",
	.kind = RPC_UNARY,
	.thread = RPC_ON_CQ,
	.request = &grpc__health__v1__health_check_request__descriptor,
	.no_auth = true,
	.handler = do_check,
};

int svc_health_register(struct rpc_server *s, struct agentd *ad)
{
	return rpc_server_register(s, &health_check);
}
