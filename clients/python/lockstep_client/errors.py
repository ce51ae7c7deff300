"""The client's exceptions: one class per gRPC status code a caller may want to catch,
all of them LockstepError (so `except LockstepError` still catches every failed call)."""
from __future__ import annotations

import grpc


class LockstepError(Exception):
    """A failed call: `code` is the gRPC status code name (e.g. "INVALID_ARGUMENT",
    "NOT_FOUND", "UNAVAILABLE", "DEADLINE_EXCEEDED") and `message` the server's text.
    Raised as the subclass of its code (JobNotFound, PermissionDenied, ...) where there
    is one."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def from_rpc(cls, error: grpc.RpcError) -> LockstepError:
        """Converts a grpc.RpcError (which is also a grpc.Call) into the LockstepError
        subclass of its code."""
        code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = error.details() if isinstance(error, grpc.Call) else str(error)
        return error_for(code.name, details or "")


class InvalidArgument(LockstepError):
    """INVALID_ARGUMENT: a spec field, a state name or a job id prefix that names several
    jobs; the message names the field."""


class NotFound(LockstepError):
    """NOT_FOUND: e.g. a checkpoint step that was not kept (the message names those that
    are)."""


class JobNotFound(NotFound):
    """NOT_FOUND: no job has this id, or an id starting with it, among the caller's."""


class AlreadyExists(LockstepError):
    """ALREADY_EXISTS: a request_id reused with another spec (the message names its job)."""


class PermissionDenied(LockstepError):
    """PERMISSION_DENIED: another user's job, or an admin's call made as a user."""


class Unauthenticated(LockstepError):
    """UNAUTHENTICATED: no token, or one the coordinator does not know."""


class FailedPrecondition(LockstepError):
    """FAILED_PRECONDITION: e.g. cancelling a job that has ended."""


class ResourceExhausted(LockstepError):
    """RESOURCE_EXHAUSTED: a per-user limit (jobs queued, submits a minute)."""


class Unavailable(LockstepError):
    """UNAVAILABLE: no coordinator answers at the address (or it is restarting)."""


class DeadlineExceeded(LockstepError):
    """DEADLINE_EXCEEDED: the call, watch or wait took longer than its timeout."""


_BY_CODE: dict[str, type[LockstepError]] = {
    "INVALID_ARGUMENT": InvalidArgument,
    "NOT_FOUND": NotFound,
    "ALREADY_EXISTS": AlreadyExists,
    "PERMISSION_DENIED": PermissionDenied,
    "UNAUTHENTICATED": Unauthenticated,
    "FAILED_PRECONDITION": FailedPrecondition,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "UNAVAILABLE": Unavailable,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
}


def error_for(code: str, message: str) -> LockstepError:
    """The exception for a status code: its subclass, else LockstepError itself."""
    return _BY_CODE.get(code, LockstepError)(code, message)
