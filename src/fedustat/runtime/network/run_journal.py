"""The durable record of a lockstep run: the server's run database, a party's own journal.

A server's run directory holds ``run.sqlite``, an SQLite database in WAL mode written
with ``synchronous=FULL`` (each commit is on disk when it returns):

* ``meta``: the run id, the public configuration and its fingerprint, the number of
  silos, ``min_silos`` and the kind of randomness (a digest of the seed, never the seed).
* ``members``: each member of the started run (slot, identity, rows, certificate,
  whether it declared itself resumable).
* ``frames``: every accepted round frame (round, slot, kind, its bytes and their
  SHA-256), committed before the frame counts. Frames arriving together are committed
  together (a group commit every :data:`GROUP_COMMIT_SECONDS`; SQLite in WAL mode
  commits about 10^4 reports/s so, against 2.4 x 10^3/s one commit per frame, measured in
  docs/network.md "Durability").
* ``checkpoint``: after each round, the server's state, the message log, the server
  rng's state and the replies of that round, committed before any reply leaves, so a
  restarted server answers with what it computed and never draws that round again.
* ``release``: the release and its summary, committed with the last checkpoint.
* ``released``: the members that received the release.

A party's state directory (:class:`PartyJournal`) holds its assignment and, before each
round's frame is sent, that frame's bytes with the party's state after the step, written
to a temporary file, fsynced and renamed over the last one (a file that exists is
complete): a restarted party resends the same bytes and goes on from that state.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pickle
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedustat.runtime.network.relay import _LENGTHS as RELAY_LENGTHS
from fedustat.runtime.network.relay import RELAY_MAGIC
from fedustat.runtime.wire import WireError, _split_frame

__all__ = ["GROUP_COMMIT_SECONDS", "PartyJournal", "RunJournal", "StoredRun",
           "default_run_root", "frame_digest", "frame_position", "new_run_id"]

#: How long accepted frames wait to be committed together (seconds).
GROUP_COMMIT_SECONDS = 0.005
DATABASE = "run.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS members (slot INTEGER PRIMARY KEY, identity TEXT NOT NULL,
    rows INTEGER NOT NULL, certificate TEXT NOT NULL, resumable INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS frames (round INTEGER NOT NULL, slot INTEGER NOT NULL,
    kind TEXT NOT NULL, digest TEXT NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (round, slot)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoint (round INTEGER PRIMARY KEY, state BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS release (id INTEGER PRIMARY KEY CHECK (id = 0),
    estimate BLOB NOT NULL, summary TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS released (slot INTEGER PRIMARY KEY);
"""


def new_run_id() -> str:
    """A run id: the start time in milliseconds and 32 random bits (hex)."""
    return f"run-{int(time.time() * 1000):x}-{os.urandom(4).hex()}"


def default_run_root() -> Path:
    """Where a server makes its run directory when none is named:
    ``$FEDUSTAT_RUN_ROOT``, else ``$XDG_DATA_HOME/fedustat/runs`` (by default
    ``~/.local/share/fedustat/runs``)."""
    root = os.environ.get("FEDUSTAT_RUN_ROOT")
    if root:
        return Path(root)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "fedustat" / "runs"


def frame_digest(frame: bytes) -> str:
    return hashlib.sha256(frame).hexdigest()


def frame_position(frame: bytes, kind: str, sender: str) -> tuple[str, int]:
    """The run id and round a Round or Relay frame names (its header only; the frame is
    validated in full by the usual decoding when it is new), or a service's Pass
    (``{"run": ..., "round": ...}``); a WireError if it names none."""
    raw = bytes(frame)
    if kind == "pass":
        try:
            said = json.loads(raw[:256].decode())
            return str(said["run"]), int(said["round"])
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise WireError(sender, "pass", f"names no run and round ({exc})") from None
    if kind == "relay":
        # A relay frame: its magic, its sections' lengths, then the wire frame of its
        # routing facts (relay.py's layout).
        head = len(RELAY_MAGIC) + RELAY_LENGTHS.size
        if len(raw) < head or raw[:len(RELAY_MAGIC)] != RELAY_MAGIC:
            raise WireError(sender, "relay", "not a relay frame")
        meta_length = RELAY_LENGTHS.unpack_from(raw, len(RELAY_MAGIC))[0]
        raw = raw[head:head + meta_length]
    header, _ = _split_frame(raw, sender)
    try:
        run = header["run"].decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(sender, "run", "not valid UTF-8") from None
    return run, int(header["round"])


@dataclass
class StoredRun:
    """What a run directory holds when a server opens it."""

    meta: dict[str, Any]
    members: list[tuple[int, str, int, str, bool]] = field(default_factory=list)
    checkpoint: tuple[int, bytes] | None = None
    #: Frames accepted after the checkpoint: (round, slot, kind, body).
    frames: list[tuple[int, int, str, bytes]] = field(default_factory=list)
    release: tuple[bytes, dict[str, Any]] | None = None
    released: set[int] = field(default_factory=set)


class RunJournal:
    """The server's run database (module docstring). Used from the server's event loop
    only: frames are committed in groups by a callback on that loop, checkpoints at once.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / DATABASE
        # Owner-only, as SQLite's WAL and shared-memory files then are: the server's
        # state may hold what it must not show (its noise, the parties' shares).
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(_SCHEMA)
        self._frames: list[tuple[int, int, str, str, bytes]] = []
        self._counted: list[Callable[[], None]] = []
        self._released: list[int] = []
        self._committed: asyncio.Future[None] | None = None
        self._scheduled = False

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, run_dir: str | os.PathLike[str] | None, meta: dict[str, Any]
             ) -> tuple[RunJournal, StoredRun | None]:
        """The journal of ``run_dir`` (made if missing; a new one under
        :func:`default_run_root` when ``None``) and what it already holds (``None`` for a
        new run, whose ``meta`` is written now). A directory holding a run of another
        configuration is refused by the caller, which compares ``StoredRun.meta``."""
        if run_dir is None:
            directory = default_run_root() / meta["run"]
        else:
            directory = Path(run_dir)
            if directory.exists() and not directory.is_dir():
                raise ValueError(f"run_dir {str(directory)!r} is a file, not a directory")
            if directory.is_dir() and not (directory / DATABASE).exists() \
                    and any(directory.iterdir()):
                raise ValueError(f"run_dir {str(directory)!r} holds files but no run "
                                 f"database ({DATABASE}): name an empty or new directory, "
                                 "or the run directory of an earlier `fedustat serve`")
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        journal = cls(directory)
        stored = journal._read()
        if stored is None:
            with journal.db:
                journal.db.execute("BEGIN IMMEDIATE")
                journal.db.executemany("INSERT INTO meta VALUES (?, ?)",
                                       [(k, json.dumps(v)) for k, v in meta.items()])
        return journal, stored

    def _read(self) -> StoredRun | None:
        meta = {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM meta")}
        if not meta:
            return None
        stored = StoredRun(meta)
        stored.members = [(int(s), i, int(r), c, bool(x)) for s, i, r, c, x in
                          self.db.execute("SELECT slot, identity, rows, certificate, "
                                          "resumable FROM members ORDER BY slot")]
        row = self.db.execute("SELECT round, state FROM checkpoint ORDER BY round DESC "
                              "LIMIT 1").fetchone()
        after = -1
        if row is not None:
            stored.checkpoint = (int(row[0]), bytes(row[1]))
            after = int(row[0])
        stored.frames = [(int(r), int(s), k, bytes(b)) for r, s, k, b in self.db.execute(
            "SELECT round, slot, kind, body FROM frames WHERE round >= ? ORDER BY slot",
            (max(after, 0),))]
        release = self.db.execute("SELECT estimate, summary FROM release").fetchone()
        if release is not None:
            stored.release = (bytes(release[0]), json.loads(release[1]))
        stored.released = {int(s) for (s,) in self.db.execute("SELECT slot FROM released")}
        return stored

    # ---------------------------------------------------------------- writing
    def start(self, members: list[tuple[int, str, int, str, bool]], state: bytes) -> None:
        """The run has started: its members and the state before round 0, at once."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("INSERT OR REPLACE INTO members VALUES (?, ?, ?, ?, ?)",
                                [(s, i, r, c, int(x)) for s, i, r, c, x in members])
            self.db.execute("INSERT OR REPLACE INTO checkpoint VALUES (0, ?)", (state,))

    async def frame(self, round_: int, slot: int, kind: str, digest: str, body: bytes,
                    counted: Callable[[], None]) -> None:
        """Commit an accepted frame with the others that arrived within
        :data:`GROUP_COMMIT_SECONDS`, then call ``counted`` (the frame enters its round);
        returns after both. The frame counts once committed even if the caller's call
        was cancelled meanwhile (a committed frame is always in its round)."""
        self._frames.append((round_, slot, kind, digest, bytes(body)))
        self._counted.append(counted)
        await asyncio.shield(self._schedule())

    def _schedule(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        if self._committed is None:
            self._committed = loop.create_future()
        if not self._scheduled:
            self._scheduled = True
            loop.call_later(GROUP_COMMIT_SECONDS, self._flush)
        return self._committed

    def _flush(self) -> None:
        frames, self._frames = self._frames, []
        counted, self._counted = self._counted, []
        released, self._released = self._released, []
        done, self._committed = self._committed, None
        self._scheduled = False
        try:
            with self.db:
                self.db.execute("BEGIN IMMEDIATE")
                self.db.executemany("INSERT INTO frames VALUES (?, ?, ?, ?, ?)", frames)
                self.db.executemany("INSERT OR IGNORE INTO released VALUES (?)",
                                    [(s,) for s in released])
        except sqlite3.Error as exc:
            if done is not None and not done.done():
                done.set_exception(OSError(f"the run database {self.path} refused a "
                                           f"write: {exc}"))
            return
        for count in counted:
            count()
        if done is not None and not done.done():
            done.set_result(None)

    def released_to(self, slot: int) -> None:
        """A member received the release (committed with the next group; not awaited)."""
        self._released.append(slot)
        self._schedule()

    def checkpoint(self, next_round: int, state: bytes,
                   release: tuple[bytes, dict[str, Any]] | None = None) -> None:
        """The state after a round (``next_round`` is the round to come), and the release
        if that round made it, committed now: nothing of the round has left yet. Only the
        latest checkpoint is kept (a restart needs no other)."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("INSERT OR REPLACE INTO checkpoint VALUES (?, ?)",
                            (next_round, state))
            self.db.execute("DELETE FROM checkpoint WHERE round < ?", (next_round,))
            if release is not None:
                self.db.execute("INSERT INTO release VALUES (0, ?, ?)",
                                (release[0], json.dumps(release[1])))

    def digest(self, round_: int, slot: int) -> str | None:
        """The digest of the frame accepted for (round, slot), if any."""
        row = self.db.execute("SELECT digest FROM frames WHERE round = ? AND slot = ?",
                              (round_, slot)).fetchone()
        return None if row is None else str(row[0])

    def counts(self) -> dict[str, int]:
        """Rows per table (what a run directory holds; for tests and operators)."""
        return {table: int(self.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
                for table in ("members", "frames", "checkpoint", "release", "released")}

    def close(self) -> None:
        if self._frames or self._released:
            self._flush()
        self.db.close()


def dumps(value: Any) -> bytes:
    """The server's own state for its own database. Pickle is used because the protocols'
    server states are arbitrary Python objects (arrays, dataclasses, logs) with no other
    serialization; the database is the server's own disk, written and read by the server
    only, never bytes received from a party."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(raw: bytes) -> Any:
    """Read back what :func:`dumps` wrote to the same process's own disk (see there)."""
    return pickle.loads(raw)


class PartyJournal:
    """A party's own state directory: its assignment, and its last round's frame and
    state after the step, so that a restarted process rejoins under the same identity,
    resends the same bytes (a re-randomized report would leak) and goes on.

    Files are written to a temporary name, fsynced and renamed (then the directory is
    fsynced): a file present is complete. Its state is pickled: the party's own disk,
    readable by its owner only.
    """

    def __init__(self, directory: str | os.PathLike[str], identity: str,
                 fingerprint: str) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.identity = identity
        self.fingerprint = fingerprint

    def _write(self, name: str, data: bytes) -> None:
        target = self.directory / name
        temporary = target.with_name(f".{name}.tmp")
        # Owner-only: the party's state holds its own secrets (shares, keys, its rows).
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                       "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
        descriptor = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def _read(self, name: str) -> bytes | None:
        path = self.directory / name
        return path.read_bytes() if path.exists() else None

    def assignment(self) -> dict[str, Any] | None:
        """The join reply this party got, if it joined before; a state directory of
        another identity or configuration is refused."""
        raw = self._read("assignment.json")
        if raw is None:
            return None
        saved = json.loads(raw)
        if saved.get("identity") != self.identity or \
                saved.get("fingerprint") != self.fingerprint:
            raise ValueError(
                f"state_dir {str(self.directory)!r} belongs to {saved.get('identity')} "
                f"with protocol configuration {saved.get('fingerprint')}, not "
                f"{self.identity} with {self.fingerprint}: give each party and run its "
                "own state directory")
        return saved["assignment"]

    def joined(self, assignment: dict[str, Any]) -> None:
        self._write("assignment.json", json.dumps({
            "identity": self.identity, "fingerprint": self.fingerprint,
            "assignment": assignment}).encode())

    def round(self) -> dict[str, Any] | None:
        """The last round this party wrote: round, kind, frame, state, rng state, message."""
        raw = self._read("round.pkl")
        return None if raw is None else loads(raw)

    def before_sending(self, record: dict[str, Any]) -> None:
        """Write a round's record; a state that cannot be pickled (a running Python
        generator) is left out, to be rebuilt by replaying the record's history."""
        try:
            data = dumps(record)
        except (TypeError, AttributeError, pickle.PicklingError):
            data = dumps({**record, "state": None})
        self._write("round.pkl", data)

    def release(self) -> dict[str, Any] | None:
        raw = self._read("release.json")
        return None if raw is None else json.loads(raw)

    def finished(self, release: dict[str, Any], rounds: int) -> None:
        self._write("release.json", json.dumps({"release": release,
                                                "rounds": rounds}).encode())
