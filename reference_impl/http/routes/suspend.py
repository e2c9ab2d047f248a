"""Routes of the suspend chapter (capability `suspend`): turn reads, suspend, recover, abandon,
and the input queue of a turn."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.http.requests import path_id, writer_lease
from reference_impl.http.threads import run_in_threadpool
from reference_impl.services.suspend import SuspendService

TURN = "/sessions/{session_id}/turns/{turn_id}"


class SuspendHandlers(Handlers):
    chapter = "suspend"

    @property
    def suspend_service(self) -> SuspendService:
        assert self.services.suspend is not None
        return self.services.suspend

    def routes(self) -> list[Route]:
        return [
            Route(TURN, self.get_turn, methods=["GET"]),
            Route(f"{TURN}/suspend", self.suspend, methods=["POST"]),
            Route(f"{TURN}/recover", self.recover, methods=["POST"]),
            Route(f"{TURN}/abandon", self.abandon, methods=["POST"]),
            Route(f"{TURN}/inputs", self.queue_input, methods=["POST"]),
            Route(f"{TURN}/inputs", self.list_inputs, methods=["GET"]),
            Route(f"{TURN}/inputs/deliver", self.deliver_inputs, methods=["POST"]),
        ]

    def _ids(self, request: Request) -> tuple[str, str]:
        return path_id(request, "session_id"), path_id(request, "turn_id")

    async def get_turn(self, request: Request) -> Response:
        principal = self.principal(request)
        sid, tid = self._ids(request)
        return JSONResponse(await self.read(self.suspend_service.get_turn, principal, sid, tid))

    async def list_inputs(self, request: Request) -> Response:
        principal = self.principal(request)
        sid, tid = self._ids(request)
        return JSONResponse(await self.read(self.suspend_service.list_inputs, principal, sid, tid))

    async def suspend(self, request: Request) -> Response:
        principal = self.principal(request)
        sid, tid = self._ids(request)
        lease = writer_lease(request)
        return JSONResponse(await run_in_threadpool(self.suspend_service.suspend, principal, sid, tid, lease))

    async def recover(self, request: Request) -> Response:
        principal = self.principal(request)
        sid, tid = self._ids(request)
        lease = writer_lease(request)
        return JSONResponse(await run_in_threadpool(self.suspend_service.recover, principal, sid, tid, lease))

    async def abandon(self, request: Request) -> Response:
        principal = self.principal(request)
        sid, tid = self._ids(request)
        lease = writer_lease(request)
        return JSONResponse(await run_in_threadpool(self.suspend_service.abandon, principal, sid, tid, lease))

    async def queue_input(self, request: Request) -> Response:
        principal = self.principal(request)
        sid, tid = self._ids(request)
        lease = writer_lease(request)
        body = await self.body(request, "input-create.json")
        result = await run_in_threadpool(self.suspend_service.queue_input, principal, sid, tid, body, lease)
        return JSONResponse(result, status_code=201)

    async def deliver_inputs(self, request: Request) -> Response:
        principal = self.principal(request)
        sid, tid = self._ids(request)
        lease = writer_lease(request)
        return JSONResponse(await run_in_threadpool(self.suspend_service.deliver_inputs, principal, sid, tid, lease))
