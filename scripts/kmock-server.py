#!/usr/bin/env python3
"""Runs kmock's Kubernetes API emulator as a standalone HTTP server on 127.0.0.1.

Usage (the interpreter is the venv that scripts/kube-tools prints):

    "$(scripts/kube-tools)/bin/python" scripts/kmock-server.py [--raw] [PORT]

PORT defaults to 0 (an ephemeral port). Once the server accepts connections it
prints the one line `listening on http://127.0.0.1:PORT` on stdout (flushed), and
then runs until SIGTERM or SIGINT, on which it exits 0 at once (open watches cut). Logs go to stderr. A kubeconfig for a client:

    clusters: [{name: kmock, cluster: {server: "http://127.0.0.1:PORT"}}]

What kmock 0.8 serves (kmock.KubernetesEmulator): an in-memory object store behind
POST (create), GET (get, list, ?watch=true), PATCH (a recursive dict merge whatever
the Content-Type; a JSON list body is applied as a JSON patch) and DELETE on
/api/v1/... and /apis/GROUP/VERSION/..., plus /version, /api, /apis and the
per-group-version resource lists. It has no resourceVersion, label selectors,
server-side apply semantics, namespaces check, subresource split, bookmarks or 410.
A PATCH of .../NAME/status merges into the whole object, which is how a test plays
the kubelet (e.g. sets a pod's status.phase, conditions and containerStatuses).

This launcher adds three things kmock cannot do from another process:

1. Discovery for the resources the adapter uses (RESOURCES below), so that
   /api/v1 and /apis/apps/v1 list them with their kind, verbs and subresources
   before any object exists (kmock otherwise lists only resources it has seen).

2. Fault injection, checked BEFORE kmock touches its store (a reaction added with
   kmock's own DSL answers the client but kmock still applies the write):

     POST   /_kmock/faults   {"method": "PATCH", "path": "^/apis/apps/v1/.*/deployments/",
                              "status": 403, "reason": "Forbidden", "message": "...",
                              "times": 1}
            method (optional, any if absent), path (a regex searched in the request
            path, optional), status (required), reason and message (optional), times
            (optional: how many requests it answers, unlimited if absent). The answer
            is a Kubernetes Status object with that code. Returns {"id": N}.
     DELETE /_kmock/faults   removes all faults.
     GET    /_kmock/requests the requests served so far: [{method, path, query,
                              content_type}] (the fault answers included).

3. Object metadata that a real API server fills in and kmock does not, written
   into the request body before kmock stores it: on POST, metadata.namespace (from
   the URL; without it kmock's namespaced watches drop the object's live events),
   uid, creationTimestamp, generation 1 and resourceVersion; on PATCH with a JSON
   object body, a new metadata.resourceVersion (one counter for all objects).
   kube-runtime's watcher needs a resourceVersion on every watched object.
   Lists still answer metadata.resourceVersion "..." and watches ignore it.
   Pass --raw to turn this off and see kmock as it is.
"""

import asyncio
import datetime
import itertools
import os
import re
import signal
import sys
import uuid
from typing import Any

import aiohttp.web
import attrs

import kmock
from kmock._internal import rendering

# (group/version/plural, kind, namespaced, subresources)
RESOURCES = [
    ("v1/namespaces", "Namespace", False, {"status"}),
    ("v1/pods", "Pod", True, {"status", "log"}),
    ("v1/services", "Service", True, {"status"}),
    ("v1/events", "Event", True, set()),
    ("apps/v1/deployments", "Deployment", True, {"status", "scale"}),
    ("apps/v1/statefulsets", "StatefulSet", True, {"status", "scale"}),
    ("events.k8s.io/v1/events", "Event", True, set()),
]
VERBS = {"create", "delete", "get", "list", "patch", "watch"}


@attrs.define(kw_only=True)
class Fault:
    status: int
    method: str | None = None
    path: re.Pattern[str] | None = None
    reason: str | None = None
    message: str | None = None
    times: int | None = None


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):
    faults: list[Fault] = attrs.field(factory=list)
    stamp: bool = True
    versions: Any = attrs.field(factory=lambda: itertools.count(1))

    def _stamp(self, request: rendering.Request) -> None:
        if not self.stamp or request.resource is None or not isinstance(request.data, dict):
            return
        meta = request.data.setdefault("metadata", {})
        if not isinstance(meta, dict):
            return
        if request.action == kmock.action.CREATE:
            if request.namespace:
                meta.setdefault("namespace", request.namespace)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp",
                            datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta.setdefault("generation", 1)
        if request.action in (kmock.action.CREATE, kmock.action.UPDATE):
            meta["resourceVersion"] = str(next(self.versions))

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        path = request.url.path
        if path.startswith("/_kmock/"):
            return await self._control(request, path)
        for fault in self.faults:
            if fault.method is not None and fault.method != str(request.method.value).upper():
                continue
            if fault.path is not None and not fault.path.search(path):
                continue
            if fault.times is not None:
                if fault.times <= 0:
                    continue
                fault.times -= 1
            return aiohttp.web.json_response({
                "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                "code": fault.status,
                "reason": fault.reason or "InternalError",
                "message": fault.message or f"injected fault for {request.method.value} {path}",
                "details": {"name": request.name or "", "kind": request.resource.plural if request.resource else ""},
            }, status=fault.status)
        self._stamp(request)
        return await super()._handle(request)

    async def _control(self, request: rendering.Request, path: str) -> aiohttp.web.StreamResponse:
        method = str(request.method.value).upper()
        if path == "/_kmock/faults" and method == "POST":
            data: dict[str, Any] = request.data or {}
            fault = Fault(
                status=int(data["status"]),
                method=str(data["method"]).upper() if data.get("method") else None,
                path=re.compile(data["path"]) if data.get("path") else None,
                reason=data.get("reason"), message=data.get("message"),
                times=int(data["times"]) if data.get("times") is not None else None,
            )
            self.faults.append(fault)
            return aiohttp.web.json_response({"id": len(self.faults) - 1}, status=201)
        if path == "/_kmock/faults" and method == "DELETE":
            self.faults.clear()
            return aiohttp.web.json_response({})
        if path == "/_kmock/requests" and method == "GET":
            return aiohttp.web.json_response([
                {"method": str(r.method.value), "path": r.url.path, "query": dict(r.params),
                 "content_type": r.headers.get("Content-Type")}
                for r in self._requests if not r.url.path.startswith("/_kmock/")
            ])
        return aiohttp.web.json_response({"error": f"no control endpoint {method} {path}"}, status=404)


async def main(port: int, stamp: bool) -> None:
    async with Emulator(stamp=stamp) as emulator, kmock.Server(emulator, host="127.0.0.1", port=port) as server:
        for key, kind, namespaced, subresources in RESOURCES:
            emulator.resources[key] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, singular=kind.lower(),
                verbs=VERBS, subresources=subresources,
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"listening on http://127.0.0.1:{server.port}", flush=True)
        await stop.wait()
        # Everything is in memory: exit at once. A graceful aiohttp shutdown would wait
        # (about two minutes) for the open watch streams, which never end by themselves.
        os._exit(0)


if __name__ == "__main__":
    args = sys.argv[1:]
    raw = "--raw" in args
    args = [a for a in args if a != "--raw"]
    if len(args) > 1 or (args and not args[0].isdigit()):
        sys.exit(__doc__)
    asyncio.run(main(int(args[0]) if args else 0, stamp=not raw))
