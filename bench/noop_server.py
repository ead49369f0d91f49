"""A spanq.v1 server that answers Send with an empty response and touches no
database: the ceiling any Python grpc.aio front-end has on this machine.
``python -m bench.noop_server PORT``"""

import asyncio
import sys

import grpc

from spanq_proto.v1 import queue_pb2, queue_pb2_grpc


class NoopService(queue_pb2_grpc.QueueServiceServicer):
    async def Send(self, request: queue_pb2.SendRequest, context: grpc.aio.ServicerContext) -> queue_pb2.SendResponse:
        return queue_pb2.SendResponse()


async def serve(port: int) -> None:
    server = grpc.aio.server()
    queue_pb2_grpc.add_QueueServiceServicer_to_server(NoopService(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
