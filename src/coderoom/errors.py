"""One error model for coderoom: every error a user can meet is a `CoderoomError` that carries
its exit code, so the same failure exits the same way whichever command or layer raises it.

Exit codes (the CLI's contract):

* 0 ok; 1 the run (or the command's work) failed;
* 2 usage or configuration: a bad flag, job file, model spec, backend name or limit, or a
  sandbox that cannot run here. These are found before any run folder exists;
* 124 a wall-clock timeout; 130 / 143 / 129 interrupted by SIGINT / SIGTERM / SIGHUP (128 + the
  signal: `interrupts.Interrupted`).

The message is for the user: one sentence saying what is wrong and what to do. It never holds
markup; the CLI prints it verbatim (see `coderoom.cli.errors`).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


def missing_extra(what: str, package: str, extra: str) -> str:
    """The one line for an optional extra that is not installed (a usage error: exit 2), the
    same from every surface: what needs it and the pip command that adds it."""
    return f"{what} needs the `{package}` Python package: pip install 'coderoom[{extra}]'"


class CoderoomError(Exception):
    """Base of every error coderoom reports to a user."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(CoderoomError, ValueError):
    """Bad input from the user: flags, a job file, a model spec, a limit, a run folder."""

    exit_code = EXIT_USAGE


class JobError(UsageError):
    """The job (coderoom.toml or flags) is invalid; the message names the file and the key."""


class ModelSpecError(UsageError):
    """A `--model` spec or a model setting from the environment cannot be used."""


class RunDirInUse(UsageError):
    """The run folder holds something already; a run never writes over earlier results."""


class RecordError(UsageError):
    """A run folder's record is missing, malformed or cut short."""


class SandboxUnavailable(UsageError):
    """The requested backend cannot run here; the message says why and what to do."""


class ImageBuildError(SandboxUnavailable):
    """A sandbox image could not be built or found; the message says what to do."""


class EnvironmentBuildError(SandboxUnavailable):
    """A declared package environment could not be built; the message names the package and the log."""


class RunFailed(CoderoomError):
    """The run went wrong after it started; its folder holds what was saved."""


class SandboxFailed(RunFailed):
    """A started sandbox could not do what the host asked: it went away, stopped answering, or
    sent something the host refuses to read."""


class SandboxLimitExceeded(SandboxFailed):
    """A host-side step on a sandbox passed one of its limits; the message names it and its value."""


class HostWriteFailed(CoderoomError):
    """coderoom could not write a run's files on the host (a full or read-only disk): the
    message names the disk and says what is kept where (`host_disk.write_problem`); a web
    page's 507."""


class SaveFailed(HostWriteFailed):
    """A workspace could not be saved whole into its run folder; nothing half-written is left."""


class RunFolderUnavailable(UsageError, HostWriteFailed):
    """A run folder could not be created or its record begun; none is left behind, so this is
    found, like a usage error, before any run folder exists."""


class SessionError(CoderoomError):
    """A request to a live session (`coderoom.service`) that cannot be served; the message says why."""


class UnknownSession(SessionError, KeyError):
    """No live session has this id: it was never opened, was closed, or idled out."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class SessionClosed(SessionError):
    """The session was closed (by its client, its idle timeout or shutdown) before this request."""


class SessionLost(SessionClosed):
    """The session's cluster node (or its Ray actor) went away under it (`serve --ray`, `mcp
    --ray`): its record so far is in its run folder, ended with the cause; its workspace is lost."""


class TooManySessions(SessionError):
    """The cap on live sessions is reached; close one or wait for one to idle out."""


class RequestRefused(SessionError):
    """A session request asked for what its bounds forbid: an unsafe name, an upload or read over
    its size limit, a path outside the allowed roots."""


class NoSuchFile(RequestRefused):
    """A read named no regular file in the workspace (or one the sandbox would not read: a link
    out of it, a special file); a web page's 404."""


class ReadTooLarge(RequestRefused):
    """A read of a file over the bound asked for it; a web page's 413."""


class WorkspaceWriteFailed(RequestRefused):
    """The sandbox would not write a file (a name its file system refuses, a full disk); the
    message says which file and the sandbox's reason."""
