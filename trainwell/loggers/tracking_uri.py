"""``log.mlflow_uri`` checked before a run writes anything: one line, in seconds.

MLflow's client finds a bad store late and slowly: ``sqlite:///`` (no file name) fails
after about two minutes of retries, an unreachable server after about four, and by then
the run folder exists and holds a failed run. So, before the run starts: the scheme must
be one MLflow stores runs in; a SQLite URI must name a file in an existing folder; a
server (``http(s)://``, a database host) must accept a connection, and a tracking server
answer a request, within :data:`PROBE_TIMEOUT_S` seconds.
"""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from trainwell.errors import UserError

PROBE_TIMEOUT_S = 5.0
KEY = "log.mlflow_uri"
# The schemes MLflow keeps runs in (its tracking stores), and database default ports.
_DATABASES = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
_OTHERS = ("file", "databricks", "databricks-uc", "uc")


def check_tracking_uri(uri: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Refuse a tracking URI MLflow cannot use, with one line (see the module).

    Example:
        >>> check_tracking_uri("sqlite:///")
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: log.mlflow_uri: 'sqlite:///' names no database file; ...
        >>> check_tracking_uri("bogus://x")
        Traceback (most recent call last):
        ...
        trainwell.errors.UserError: log.mlflow_uri: 'bogus://x': MLflow has no store for ...
    """
    parsed = urllib.parse.urlparse(uri)
    scheme = parsed.scheme.lower()
    base = scheme.split("+", 1)[0]  # postgresql+psycopg2://
    if base == "sqlite":
        _check_sqlite(uri)
    elif scheme in ("http", "https"):
        _probe_server(uri, timeout)
    elif base in _DATABASES:
        _connect(uri, parsed.hostname, parsed.port or _DATABASES[base], timeout)
    elif scheme == "" or scheme in _OTHERS or _windows_drive(uri):
        return
    else:
        raise UserError(
            f"{KEY}: {uri!r}: MLflow has no store for {scheme}:// URIs; use sqlite:///FILE.db, "
            "a folder, http(s)://HOST:PORT of a tracking server, or a database URI"
        )


def _windows_drive(uri: str) -> bool:
    return len(uri) > 2 and uri[1] == ":" and uri[0].isalpha()


def _check_sqlite(uri: str) -> None:
    prefix = "sqlite:///"
    if uri.startswith("sqlite://") and not uri.startswith(prefix):
        # sqlite:// alone is an in-memory database: MLflow's runs would vanish at the end.
        raise UserError(f"{KEY}: {uri!r} names no database file; e.g. sqlite:///mlflow.db")
    name = uri[len(prefix) :].split("?", 1)[0]
    if not name or name.endswith("/"):
        raise UserError(f"{KEY}: {uri!r} names no database file; e.g. sqlite:///mlflow.db")
    path = Path(name).expanduser()
    if path.is_dir():
        raise UserError(f"{KEY}: {uri!r}: {path} is a folder, not a database file")
    # MLflow makes the database's missing folders: what must hold is that the nearest one
    # that exists is a folder (a file there can hold no database below it).
    existing = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not existing.is_dir():
        raise UserError(f"{KEY}: {uri!r}: {existing} is a file, not a folder")


def _connect(uri: str, host: str | None, port: int, timeout: float) -> None:
    if not host:
        return  # a local socket or a driver's default: the store says soon enough
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as exc:
        raise UserError(_unreachable(uri, exc, timeout)) from None


def _probe_server(uri: str, timeout: float) -> None:
    """Any HTTP answer (401 and 404 included) proves a server; none in time refuses it."""
    url = uri.rstrip("/") + "/health"
    try:
        # urllib honours HTTP(S)_PROXY as MLflow's client (requests) does.
        with urllib.request.urlopen(url, timeout=timeout):  # noqa: S310 - http(s) only
            return
    except urllib.error.HTTPError:
        return  # it answered
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ssl.SSLError):
            return  # it answered; certificate settings are MLflow's (MLFLOW_TRACKING_*)
        raise UserError(_unreachable(uri, reason, timeout)) from None
    except (OSError, ValueError) as exc:  # a read that timed out, a malformed URL
        raise UserError(_unreachable(uri, exc, timeout)) from None


def _unreachable(uri: str, exc: object, timeout: float) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        why = f"no answer in {timeout:g}s"
    elif isinstance(exc, OSError) and exc.strerror:
        why = exc.strerror.lower()
    else:
        why = str(exc) or type(exc).__name__
    return (
        f"{KEY}: the tracking store at {uri} is unreachable ({why}); start it, or set "
        f"{KEY} to one that answers (e.g. sqlite:///mlflow.db), or log.mlflow=false"
    )
