# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Where the rollout's journal lives on the controller: ``<rollout_report_dir>/journal.db``.

The journal (a dict, see ``plugins/module_utils/rollout.py``) is kept in one SQLite database, so
that a call of the journal action reads and writes what it needs, not the whole journal:

* ``fleet``: one row, the run-level fields as compact JSON (id, runs, status, halt, canaries,
  notices, the budget's counters...);
* ``hosts``: one row per host, its record as compact JSON, whether it failed (indexed), and the
  hash of its contract's ``entry`` (the variant table entry, most of a record's size);
* ``entries``: each distinct entry once, by its sha256;
* ``replicas``: host -> replica name (indexed by name).

``record``, ``step`` and ``admit`` load a *view* (``load_view``): the fleet row and the rows of the
host and of its replica's members, then write back what changed (``save_view``), in one
``BEGIN IMMEDIATE`` transaction: the cost of a call does not grow with the fleet. ``open`` and
``close`` read and write the whole journal (``load_full``, ``replace``) once, and the journal
action writes ``journal.json``, a full snapshot in the report's format, at open and close.

Durability and locking. The journal action serialises its calls with an exclusive flock, as
before; each call's changes are one SQLite transaction (``BEGIN IMMEDIATE``: no other writer
until it commits), so that a kill -9 at any point leaves either the state before the call or the
state after it, and the next call (or run) reads a journal that resumes. The database keeps a
rollback journal (``journal_mode=TRUNCATE``) rather than a write-ahead log: every journal call is
its own short-lived process (Ansible forks a worker per task and host), and in WAL mode the last
connection to close checkpoints the log and removes ``-wal`` and ``-shm`` every time, which costs
more than the rollback journal does (docs/rollout.md, "Journal, resume and reports").
``synchronous=NORMAL``: a committed record survives any kill of the controller's processes; a
power loss or a crash of the controller's OS leaves the journal consistent and may lose the last
record (``FULL`` would cost one more fsync per record; the journal.json of journal version 2 was
rewritten without any fsync).

Files. The database and its ``-journal`` are created mode 0600 without following a link, as the
lock file; a link, or anything but a regular file, at ``journal.db``, ``journal.db-journal``,
``journal.db-wal`` or ``journal.db-shm`` is refused.

Which journal is live (``live_journal``): the store's when it holds one; otherwise a
``journal.json`` written by code of journal version 2 (before the store) is imported; a
``journal.json`` of version 3 that says ``running`` while the store holds no journal is a stale
snapshot (the store was lost) and is refused, since resuming from it could restart a host twice.

The live journal, for people and tests, whatever the state of the run (a run killed mid-way
included)::

    python -m ansible_collections.inkling.fleet.plugins.module_utils.rollout_store dump REPORT_DIR

prints it as JSON (the format of journal.json), as ``inkling.fleet.rollout_journal`` with
``action=read`` returns it.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import errno
import hashlib
import json
import os
import sqlite3
import stat
import sys
from urllib.parse import quote

from ansible_collections.inkling.fleet.plugins.module_utils import rollout as engine

DB_NAME = 'journal.db'
SNAPSHOT_NAME = 'journal.json'
# The layout of the tables (PRAGMA user_version); 0: a database without a journal.
STORE_VERSION = 1
# How long a call waits for another SQLite user of the database (the dump CLI reading it).
BUSY_TIMEOUT_S = 60
# Rows per SELECT ... IN (...), under SQLite's smallest limit on bound parameters (999).
_CHUNK = 500

_SCHEMA = (
    'CREATE TABLE IF NOT EXISTS fleet (id INTEGER PRIMARY KEY CHECK (id = 1), doc TEXT NOT NULL)',
    'CREATE TABLE IF NOT EXISTS hosts (name TEXT PRIMARY KEY, doc TEXT NOT NULL, entry TEXT, '
    'failed INTEGER NOT NULL DEFAULT 0)',
    'CREATE INDEX IF NOT EXISTS hosts_failed ON hosts (failed) WHERE failed = 1',
    'CREATE TABLE IF NOT EXISTS entries (hash TEXT PRIMARY KEY, doc TEXT NOT NULL)',
    'CREATE TABLE IF NOT EXISTS replicas (host TEXT PRIMARY KEY, name TEXT NOT NULL)',
    'CREATE INDEX IF NOT EXISTS replicas_name ON replicas (name)',
)


class StoreError(Exception):
    """A journal this code cannot use. ``refused``: it is not a journal this code works on (left
    untouched; the remedy is to move it aside); else the store could not be used (a lock held too
    long, a disk error)."""

    def __init__(self, path, why, refused=True):
        super(StoreError, self).__init__('%s: %s' % (path, why))
        self.path = path
        self.why = why
        self.refused = refused


def compact(data):
    """JSON without spaces, keys sorted (equal records give equal text): the store's and the snapshot's."""
    return json.dumps(data, sort_keys=True, separators=(',', ':'))


def split_record(rec):
    """A host record as its row: (doc, entry hash, entry doc). The contract's ``entry`` (the variant
    table entry, the same for every host of a variant) is stored once, by its hash; the rest of the
    record (its host name included) stays in the row."""
    target = rec.get('target')
    if isinstance(target, dict) and 'entry' in target:
        entry = compact(target['entry'])
        digest = hashlib.sha256(entry.encode('utf-8')).hexdigest()
        rec = dict(rec)
        rec['target'] = dict((k, v) for k, v in target.items() if k != 'entry')
        return compact(rec), digest, entry
    return compact(rec), None, None


def fleet_doc(journal):
    """The run-level part of a journal (the fleet row): everything but the hosts and the replicas."""
    return compact(dict((k, v) for k, v in journal.items() if k not in ('hosts', 'replicas')))


def _secure_file(path, create):
    """``path`` is absent (False, unless ``create``: then created 0600) or a regular file (True), opened
    without following a link; a looser mode is narrowed to 0600. A link or anything else is refused."""
    flags = os.O_RDWR | getattr(os, 'O_NOFOLLOW', 0) | getattr(os, 'O_CLOEXEC', 0) | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ENOENT and not create:
            return False
        raise StoreError(path, '%s (a link or anything but a regular file is refused)' % (e.strerror or e),
                         refused=False)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(path, 'not a regular file', refused=False)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return True


def _loads(text, path, what):
    try:
        data = json.loads(text)
    except ValueError as e:
        raise StoreError(path, '%s is not JSON: %s' % (what, e))
    if not isinstance(data, dict):
        raise StoreError(path, '%s is JSON that is not an object' % what)
    return data


class Store(object):
    """The journal's database in ``directory`` (opened when it exists; ``create`` makes it)."""

    def __init__(self, directory):
        self.directory = directory
        self.path = os.path.join(directory, DB_NAME)
        self.conn = None
        self._fleet = None          # the fleet row's text as loaded (save_view writes it only when changed)
        self._rows = {}             # host -> (doc, entry hash) as loaded
        self._entries = {}          # entry hash -> its dict, as loaded
        for suffix in ('-wal', '-shm'):
            _secure_file(self.path + suffix, create=False)
        if _secure_file(self.path, create=False):
            self._connect()

    # -- connection and transactions ---------------------------------------------------------

    def create(self):
        """Create the database file (0600, no link followed) when there is none, and connect."""
        if self.conn is None:
            _secure_file(self.path, create=True)
            self._connect()

    def _connect(self):
        _secure_file(self.path + '-journal', create=True)
        try:
            self.conn = sqlite3.connect('file:%s?mode=rw' % quote(os.path.abspath(self.path)), uri=True,
                                        timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as e:
            raise StoreError(self.path, str(e), refused=False)
        self._sql('PRAGMA journal_mode=TRUNCATE')
        self._sql('PRAGMA synchronous=NORMAL')

    def _sql(self, statement, params=()):
        """Every statement goes through here (the crash tests kill the process between two of them)."""
        try:
            return self.conn.execute(statement, params)
        except sqlite3.OperationalError as e:
            raise StoreError(self.path, str(e), refused='no such table' in str(e))
        except sqlite3.DatabaseError as e:
            raise StoreError(self.path, str(e))

    def _sql_many(self, statement, rows):
        try:
            return self.conn.executemany(statement, rows)
        except sqlite3.DatabaseError as e:
            raise StoreError(self.path, str(e), refused=not isinstance(e, sqlite3.OperationalError))

    @property
    def exists(self):
        return self.conn is not None

    def begin(self):
        """The writer's lock: BEGIN IMMEDIATE (no other writer until commit), checking the layout."""
        self._sql('BEGIN IMMEDIATE')
        version = self._sql('PRAGMA user_version').fetchone()[0]
        if version > STORE_VERSION:
            raise StoreError(self.path, 'store version %d: this code reads store version %d or older'
                             % (version, STORE_VERSION))
        return version

    def begin_read(self):
        """One consistent read (a writer waits for it, within the busy timeout)."""
        if self.conn is not None:
            self._sql('BEGIN')

    def commit(self):
        self._sql('COMMIT')

    def rollback(self):
        if self.conn is not None and self.conn.in_transaction:
            try:
                self.conn.execute('ROLLBACK')
            except sqlite3.Error:
                pass

    def close(self):
        if self.conn is not None:
            self.rollback()
            self.conn.close()
            self.conn = None

    # -- the whole journal (open, close, read) -----------------------------------------------

    def has_journal(self):
        """Whether the database holds a journal (inside a transaction: after begin)."""
        if self.conn is None or self._sql('PRAGMA user_version').fetchone()[0] < 1:
            return False
        return self._sql('SELECT 1 FROM fleet WHERE id = 1').fetchone() is not None

    def _entry(self, digest):
        if digest not in self._entries:
            row = self._sql('SELECT doc FROM entries WHERE hash = ?', (digest,)).fetchone()
            if row is None:
                raise StoreError(self.path, 'a host names the contract entry %s, which is missing' % digest[:12])
            try:
                self._entries[digest] = json.loads(row[0])
            except ValueError as e:
                raise StoreError(self.path, 'entry %s is not JSON: %s' % (digest[:12], e))
        return self._entries[digest]

    def _host(self, name, doc, digest):
        rec = _loads(doc, self.path, 'hosts.%s' % name)
        if digest:
            if not isinstance(rec.get('target'), dict):
                raise StoreError(self.path, 'hosts.%s names a contract entry but has no target' % name)
            rec['target']['entry'] = self._entry(digest)
        self._rows[name] = (doc, digest)
        return rec

    def load_full(self):
        """The whole journal (None when the database holds none): open, close and read, once per run.
        Hosts of one variant share their entry's dict (read it, do not change it)."""
        if not self.has_journal():
            return None
        row = self._sql('SELECT doc FROM fleet WHERE id = 1').fetchone()
        journal = _loads(row[0], self.path, 'the fleet row')
        self._fleet = row[0]
        for digest, doc in self._sql('SELECT hash, doc FROM entries').fetchall():
            try:
                self._entries[digest] = json.loads(doc)
            except ValueError as e:
                raise StoreError(self.path, 'entry %s is not JSON: %s' % (digest[:12], e))
        journal['hosts'] = dict((name, self._host(name, doc, digest)) for name, doc, digest in
                                self._sql('SELECT name, doc, entry FROM hosts ORDER BY name').fetchall())
        journal['replicas'] = dict(self._sql('SELECT host, name FROM replicas ORDER BY host').fetchall())
        return journal

    def replace(self, journal):
        """Make the database hold ``journal`` and nothing else (open, close): inside the caller's
        transaction, so that a kill leaves the old journal or the new one, never a mix."""
        for statement in _SCHEMA:
            self._sql(statement)
        for table in ('hosts', 'entries', 'replicas', 'fleet'):
            self._sql('DELETE FROM %s' % table)
        self._fleet = fleet_doc(journal)
        self._sql('INSERT INTO fleet (id, doc) VALUES (1, ?)', (self._fleet,))
        rows, entries = [], {}
        self._rows = {}
        for name in sorted(journal.get('hosts') or {}):
            rec = journal['hosts'][name]
            doc, digest, entry = split_record(rec)
            if digest:
                entries[digest] = entry
            rows.append((name, doc, digest, 1 if rec.get('phase') in engine.FAILED else 0))
            self._rows[name] = (doc, digest)
        self._sql_many('INSERT INTO entries (hash, doc) VALUES (?, ?)', sorted(entries.items()))
        self._sql_many('INSERT INTO hosts (name, doc, entry, failed) VALUES (?, ?, ?, ?)', rows)
        self._sql_many('INSERT INTO replicas (host, name) VALUES (?, ?)',
                       sorted((journal.get('replicas') or {}).items()))
        self._sql('PRAGMA user_version = %d' % STORE_VERSION)

    # -- a view (record, step, admit) ----------------------------------------------------------

    def load_view(self, host):
        """The run-level fields, with ``hosts`` and ``replicas`` holding only ``host`` and its replica's
        members: what record, record_step and admit read (None when the database holds no journal)."""
        if not self.has_journal():
            return None
        row = self._sql('SELECT doc FROM fleet WHERE id = 1').fetchone()
        view = _loads(row[0], self.path, 'the fleet row')
        if not isinstance(view.get('counters'), dict):
            raise StoreError(self.path, 'the fleet row has no counters of the failure budget')
        self._fleet = row[0]
        view['hosts'] = {}
        view['replicas'] = {}
        mine = self._sql('SELECT name FROM replicas WHERE host = ?', (host,)).fetchone()
        if mine:
            view['replicas'] = dict(self._sql('SELECT host, name FROM replicas WHERE name = ?', (mine[0],)).fetchall())
        self._add_hosts(view, [host] + sorted(view['replicas']))
        return view

    def _add_hosts(self, view, names):
        names = [n for n in names if n not in view['hosts']]
        for i in range(0, len(names), _CHUNK):
            chunk = names[i:i + _CHUNK]
            for name, doc, digest in self._sql('SELECT name, doc, entry FROM hosts WHERE name IN (%s)'
                                               % ','.join('?' * len(chunk)), chunk).fetchall():
                view['hosts'][name] = self._host(name, doc, digest)

    def add_failed(self, view):
        """Add every failed host and its replica's members to ``view`` (check_budget's halt reason names
        them): once per rollout, when engine.halt_needed says the budget is spent."""
        failed = [name for name, in self._sql('SELECT name FROM hosts WHERE failed = 1').fetchall()]
        self._add_hosts(view, failed)
        view['replicas'].update(self._sql(
            'SELECT host, name FROM replicas WHERE name IN (SELECT r.name FROM replicas r JOIN hosts h '
            'ON h.name = r.host WHERE h.failed = 1)').fetchall())

    def save_view(self, view):
        """Write back what the decision changed in a view: the fleet row, and each host row that changed."""
        fleet = fleet_doc(view)
        if fleet != self._fleet:
            self._sql('UPDATE fleet SET doc = ? WHERE id = 1', (fleet,))
            self._fleet = fleet
        for name in sorted(view['hosts']):
            rec = view['hosts'][name]
            doc, digest, entry = split_record(rec)
            old = self._rows.get(name)
            if old == (doc, digest):
                continue
            if digest and (old is None or old[1] != digest):
                self._sql('INSERT OR IGNORE INTO entries (hash, doc) VALUES (?, ?)', (digest, entry))
            failed = 1 if rec.get('phase') in engine.FAILED else 0
            if old is None:
                self._sql('INSERT INTO hosts (name, doc, entry, failed) VALUES (?, ?, ?, ?)', (name, doc, digest, failed))
            else:
                self._sql('UPDATE hosts SET doc = ?, entry = ?, failed = ? WHERE name = ?', (doc, digest, failed, name))
            self._rows[name] = (doc, digest)


def read_snapshot(path):
    """journal.json as a dict, or None when there is none. Raises StoreError when it is not a JSON object."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError as e:
        raise StoreError(path, str(e))
    if not isinstance(data, dict):
        raise StoreError(path, 'it holds JSON that is not an object')
    return data


def snapshot_role(snapshot):
    """What journal.json is when the store holds no journal: 'import' (written by code of journal
    version 2 or older, the live journal then: imported), 'closed' (a snapshot of a finished rollout:
    read, nothing to resume) or 'stale' (a snapshot of a running rollout whose store is gone)."""
    version = snapshot.get('version')
    if not isinstance(version, int) or version < 3:
        return 'import'
    return 'stale' if snapshot.get('status') == 'running' else 'closed'


def check(journal, path):
    """Refuse a journal this code cannot work on (engine.check_journal), naming ``path``."""
    problems = engine.check_journal(journal)
    if problems:
        raise StoreError(path, '; '.join(problems[:5]))
    return journal


def live_journal(store):
    """The live journal of ``store``'s directory, whole, or None: the store's (inside the caller's
    transaction), else journal.json as snapshot_role says. Raises StoreError for one to refuse."""
    if store.exists and store.has_journal():
        return check(store.load_full(), store.path)
    path = os.path.join(store.directory, SNAPSHOT_NAME)
    snapshot = read_snapshot(path)
    if snapshot is None:
        return None
    if snapshot_role(check(snapshot, path)) == 'stale':
        raise StoreError(path, 'it is the snapshot of rollout %s, still running, whose live journal %s is missing or '
                         'empty: resuming from the snapshot could restart hosts that rollout already restarted'
                         % (snapshot.get('id'), store.path))
    return snapshot


def dump(directory, out=None):
    """Print the live journal of ``directory`` (format of journal.json); 1 when there is none."""
    out = out or sys.stdout
    store = Store(directory)
    try:
        store.begin_read()
        journal = live_journal(store)
    finally:
        store.close()
    if journal is None:
        sys.stderr.write('no rollout journal in %s\n' % directory)
        return 1
    out.write(compact(engine.published(journal)) + '\n')
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != 'dump':
        sys.stderr.write('usage: python -m ansible_collections.inkling.fleet.plugins.module_utils.rollout_store dump '
                         'REPORT_DIR\n  prints the live rollout journal of REPORT_DIR (journal.db, or journal.json) '
                         'as JSON\n')
        return 2
    try:
        return dump(argv[1])
    except StoreError as e:
        sys.stderr.write('rollout journal: %s\n' % e)
        return 1


if __name__ == '__main__':
    raise SystemExit(main())
