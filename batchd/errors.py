"""One exception hierarchy for the daemon. Each error has a stable `code`, an HTTP
status for the wire, and the exit code Slurm's command would use (`exit`).

The API layer turns any `BatchdError` into the envelope of `batchd/protocol.py`:
`{"error": {"code", "message", "exit"}}`, plus `"detail"` when the error explains itself
beyond Slurm's words: the commands print it on a line of its own after Slurm's message, so
that scripts matching Slurm's line still match.
"""


class BatchdError(Exception):
    code = "Error"
    status = 400
    exit_code = 1

    def __init__(self, message: str, *, exit_code: int | None = None, code: str | None = None,
                 detail: str | None = None):
        super().__init__(message)
        self.message = message
        self.detail = detail  # batchd's own explanation, printed after Slurm's message
        if exit_code is not None:
            self.exit_code = exit_code
        if code is not None:
            self.code = code

    def envelope(self) -> dict:
        err: dict = {"code": self.code, "message": self.message, "exit": self.exit_code}
        if self.detail:
            err["detail"] = self.detail
        return {"error": err}


class InvalidRequest(BatchdError):
    """Malformed input (a parse error on the server side)."""
    code = "InvalidRequest"


class SubmitError(BatchdError):
    """A submission the cluster refuses; sbatch prints
    `sbatch: error: Batch job submission failed: <message>`."""
    code = "SubmitRejected"


class NotFound(BatchdError):
    code = "NotFound"
    status = 404


class PermissionDenied(BatchdError):
    code = "AccessDenied"
    status = 403


class Conflict(BatchdError):
    """The request does not fit the object's current state (e.g. hold a running job)."""
    code = "Conflict"
    status = 409


class ConfigError(BatchdError):
    """A wrong configuration file; the message names the key and the problem."""
    code = "ConfigError"


class StoreError(BatchdError):
    """The database is unusable (e.g. not at the head migration)."""
    code = "StoreError"
    status = 503
