# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The transfers of hf_peer_copy (one receiver of the hf_cache peer fan-out): its sources (the peers' relays and
rsync daemons, in the relay's order, the ones dropped and why), one blob streamed by a source's relay while the
source still receives it (``receive_relay``), one blob per rsync connection (``receive``) or every blob a source
holds of those this host lacks in one rsync connection (``receive_batch``), each hashed while it arrives and moved
in under its final name only when its size and hash are the hub's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shutil
import socket
import subprocess
import time

from ansible_collections.inkling.fleet.plugins.module_utils import hf_cache as hc
from ansible_collections.inkling.fleet.plugins.module_utils import hf_fanout
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_daemon
from ansible_collections.inkling.fleet.plugins.module_utils import hf_peer_relay

CACHE_MODULE = 'inkling-hf'
RUN_MODULE = 'inkling-hf-run'
LIST_LINE = re.compile(r'^-\S*\s+([\d,.]+)\s+\S+\s+\S+\s+(\S+)$')
READ_CHUNK = 4 * 1024 * 1024
# A transfer that brings no byte for switch_after_s + this is stopped here: rsync's own --timeout did not
# end a --files-from transfer whose source host vanished mid-blob (bench, 2026-12-01: stuck for 761 s).
STALL_GRACE_S = 5


def stalled(last, t):
    """True when the last byte came more than t + STALL_GRACE_S seconds ago."""
    return time.time() - last > t + STALL_GRACE_S


def stall_detail(t):
    return 'no data for %d s (the source host may be gone); the transfer was stopped' % (t + STALL_GRACE_S)


def err_line(err):
    """The line of rsync's stderr that says why (the daemon's @ERROR line when there is one)."""
    lines = [l for l in (err or '').splitlines() if l.strip()]
    said = [l for l in lines if '@ERROR' in l]
    return (said or lines or [''])[0 if said else -1]


def host_name():
    return os.uname()[1]


def rsync_url(address, port, module, path='', user=None):
    if ':' in address and not address.startswith('['):
        address = '[%s]' % address
    return 'rsync://%s%s:%d/%s/%s' % (user + '@' if user else '', address, port, module, path)


class Sources(object):
    """The ordered sources, the ones dropped and why, and the daemons' answers."""

    def __init__(self, p):
        self.p = p
        self.addr = p['addresses']
        self.order = hf_fanout.relay_sources(p['host'], p['peers'], p['roots'], p['degree'])
        self.env = dict(os.environ, RSYNC_PASSWORD=p['secret'])
        self.failed = []
        self.errors = []
        self.switches = []
        self.silent_since = {}
        self.no_relay = {}
        self.answered = set()
        self.started = time.time()
        self.current = None
        self.since = time.time()

    def control(self):
        data = hc.read_json(self.p['control_file'], {}) or {}
        if data.get('run') != self.p['control_id']:
            return set(), False, ''      # none yet, or left by an interrupted run
        return set(data.get('dead') or []), bool(data.get('abort')), data.get('reason') or ''

    def candidates(self, dead):
        return [s for s in self.order if s not in dead and s not in self.failed]

    def use(self, name):
        if name != self.current:
            self.current, self.since = name, time.time()

    def drop(self, name, why):
        if name in self.failed:
            return
        self.failed.append(name)
        self.errors.append('%s: %s' % (name, why))
        if name == self.current:
            self.current = None
        self.switches.append('from %s after %.0f s: %s' % (name, time.time() - self.since, why))

    def relay(self, name):
        """True when name's relay is to be asked first (this run has a relay port and it did not fail yet)."""
        return bool(self.p.get('relay_port')) and name not in self.no_relay

    def url(self, name, module, path=''):
        return rsync_url(self.addr[name], self.p['port'], module, path, self.p['user'])

    def rsync(self, argv, timeout=None):
        try:
            res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                 env=self.env, timeout=timeout, check=False)
            return res.returncode, res.stdout, (res.stderr or '').strip()[-400:]
        except subprocess.TimeoutExpired:
            return 30, '', 'no answer within %d s' % timeout

    def listing(self, name):
        """{etag: size} of the verified blobs name's daemon serves, or None when it does not answer."""
        t = self.p['switch_after_s']
        rc, out, err = self.rsync(['rsync', '--list-only', '--contimeout=%d' % t, '--timeout=%d' % t,
                                   self.url(name, CACHE_MODULE, 'blobs/')], timeout=t + 5)
        if rc not in (0, 23):
            since = self.silent_since.setdefault(name, time.time())
            # a daemon never seen may still be starting (its host is slower): start_timeout_s from the start
            limit = t if name in self.answered else max(t, self.p['start_timeout_s'] - (since - self.started))
            if time.time() - since >= limit or 'auth failed' in err:
                self.drop(name, 'its rsync daemon refused or did not answer for %.0f s (rsync rc %d: %s)'
                          % (time.time() - since, rc, err_line(err)))
            return None
        self.silent_since.pop(name, None)
        self.answered.add(name)
        out_map = {}
        for line in out.splitlines():
            m = LIST_LINE.match(line.strip())
            if m:
                out_map[m.group(2)] = int(re.sub(r'[,.]', '', m.group(1)))
        return out_map

    def gave_up(self, name):
        path = self.p.get('gave_up_file')
        if not path:
            return False
        rc, dummy, dummy = self.rsync(['rsync', '--list-only', '--contimeout=10', '--timeout=10',
                                       self.url(name, RUN_MODULE, os.path.basename(path))], timeout=20)
        return rc == 0


def stop_rsync(proc):
    """Stop an rsync that still runs (TERM, then KILL after 10 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def receive(src, name, rdir, entry, prog):
    """Copy one blob from name into blobs/ETAG.incomplete, hashing it while it arrives, and move it into
    place when its size and hash are the hub's. Returns (ok, kind, detail): kind 'missing', 'rsync', 'hash' or
    'stalled' (no byte for switch_after_s + STALL_GRACE_S: rsync stopped)."""
    part = hc.incomplete_path(rdir, entry.etag)
    if os.path.lexists(part):
        os.unlink(part)
    t = src.p['switch_after_s']
    argv = ['rsync', '--whole-file', '--inplace', '--contimeout=%d' % t, '--timeout=%d' % t,
            src.url(name, CACHE_MODULE, 'blobs/%s' % entry.etag), part]
    with prog.lock:
        prog.current = (entry, lambda: [part])
    hasher = hc.new_hasher(entry)
    seen = 0
    proc = hf_peer_daemon.start_rsync(argv, src.env)
    handle = None
    last, stuck, over = time.time(), False, False
    try:
        while True:
            ended = proc.poll() is not None
            if handle is None and os.path.exists(part):
                handle = open(part, 'rb')
            data = handle.read(READ_CHUNK) if handle is not None else b''
            if data:
                hasher.update(data)
                seen += len(data)
                last = time.time()
                if seen > entry.size:   # a peer that sends more than the hub's size: stop it now
                    over = True
                    break
                continue
            if ended:
                break
            if stalled(last, t):
                stuck = True
                break
            time.sleep(0.02)
        if stuck or over:
            stop_rsync(proc)
            err = stall_detail(t) if stuck else ''
        else:
            err = (proc.stderr.read() or '').strip()[-400:]
    finally:
        if handle is not None:
            handle.close()
        with prog.lock:
            prog.current = None
    if stuck or over:
        if os.path.lexists(part):
            os.unlink(part)
        return (False, 'stalled', err) if stuck else (False, 'hash', oversize(entry))
    if proc.returncode != 0:
        if os.path.lexists(part):
            os.unlink(part)
        # 23: the source does not hold it (yet)
        return False, 'missing' if proc.returncode == 23 else 'rsync', 'rsync rc %d: %s' % (proc.returncode, err_line(err))
    detail = verdict(entry, seen, hasher.hexdigest())
    if detail:
        os.unlink(part)
        return False, 'hash', detail
    os.chmod(part, 0o644)
    os.rename(part, hc.blob_path(rdir, entry.etag))
    return True, None, None


def local_blobs(rdir, blobs):
    """Blobs already on disk with the hub's size and hash (a resumed run); wrong ones are removed."""
    good = set()
    for e in blobs:
        bp = hc.blob_path(rdir, e.etag)
        if not os.path.isfile(bp) or os.path.islink(bp):
            continue
        if os.path.getsize(bp) == e.size and hc.hash_file(bp, e) == e.etag:
            good.add(e.etag)
        else:
            os.unlink(bp)
    return good


INBOX = 'incoming'


def inbox_dir(rdir):
    """Where a batch's rsync writes and the relay's blobs arrive (under the state directory: same file system as
    blobs/; the rsync daemon never serves it, this host's relay streams the ``ETAG.part`` files in it on while they
    arrive)."""
    return os.path.join(hc.state_dir(rdir), INBOX)


def clear_inbox(rdir):
    """Remove what a batch (or a killed run's) left in the inbox."""
    path = inbox_dir(rdir)
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


class _Arrival(object):
    """One blob of a batch while it arrives: its file (rsync's temporary one, then its final name), hashed as
    it grows."""

    def __init__(self, entry, path):
        self.entry = entry
        self.handle = open(path, 'rb')
        self.hasher = hc.new_hasher(entry)
        self.seen = 0

    def read(self):
        data = self.handle.read(READ_CHUNK)
        if data:
            self.hasher.update(data)
            self.seen += len(data)
        return len(data)

    def finish(self, final):
        """Size and hash of the file rsync completed at final (hashed again when it is not the file read)."""
        if os.fstat(self.handle.fileno()).st_ino != os.stat(final).st_ino:
            self.close()
            self.__init__(self.entry, final)
        while self.read():
            pass
        self.close()
        return self.seen, self.hasher.hexdigest()

    def close(self):
        if self.handle is not None:
            self.handle.close()
            self.handle = None


def oversize(entry):
    """What a receiver says of a peer that sent more bytes than the hub's size (stopped there: a peer cannot fill
    a receiver's disk)."""
    return 'more than the hub\'s %d bytes: stopped' % entry.size


def verdict(entry, seen, digest):
    """None when size and hash are the hub's, else what differs."""
    if seen != entry.size:
        return '%d bytes, hub says %d' % (seen, entry.size)
    if digest != entry.etag:
        return '%s is %s, hub says %s' % (entry.algo, digest, entry.etag)
    return None


def receive_batch(src, name, rdir, entries, prog, on_verified):
    """Copy every blob of entries that name holds in ONE rsync connection (``--files-from`` the blob names: a
    blob the source lacks is skipped, rsync exits 23), into the inbox under the state directory. Each blob is
    hashed while rsync writes it (its temporary file ``.ETAG.XXXXXX``, then its final name, which rsync gives it
    once the blob is complete and closed); a complete blob whose size and hash are the hub's is moved at once to
    ``blobs/ETAG`` (so this host relays it while the rest of the batch arrives) and ``on_verified(entry)`` is
    called. The first blob with another size or hash ends the batch (rsync is stopped).

    Returns ``(got, kind, detail, entry)``: the number of blobs moved in; kind None (the transfer ended well),
    ``'missing'`` (the source held none of them), ``'rsync'`` (the transfer failed; detail says why), ``'stalled'``
    (no byte for switch_after_s + STALL_GRACE_S, rsync stopped) or ``'hash'`` (entry was served with another
    content; detail says what)."""
    clear_inbox(rdir)
    inbox = inbox_dir(rdir)
    os.makedirs(inbox)
    pending = dict((e.etag, e) for e in entries)
    names = os.path.join(hc.state_dir(rdir), 'incoming.files')
    errfile = os.path.join(hc.state_dir(rdir), 'incoming.err')
    with open(names, 'w') as f:
        f.write(''.join('%s\n' % etag for etag in sorted(pending)))
    t = src.p['switch_after_s']
    argv = ['rsync', '--whole-file', '--files-from=%s' % names, '--contimeout=%d' % t, '--timeout=%d' % t,
            src.url(name, CACHE_MODULE, 'blobs/'), inbox + '/']
    arriving = {}
    got, bad = 0, None
    last, stuck = time.time(), False
    with open(errfile, 'w+') as err:
        proc = hf_peer_daemon.start_rsync(argv, src.env, stderr=err)
        try:
            while bad is None:
                ended = proc.poll() is not None
                moved = 0
                for n in sorted(os.listdir(inbox)):
                    etag = n if n in pending else n[1:].rsplit('.', 1)[0] if n.startswith('.') else None
                    if etag not in pending:
                        continue
                    path = os.path.join(inbox, n)
                    if etag not in arriving:
                        try:
                            arriving[etag] = _Arrival(pending[etag], path)
                        except (IOError, OSError):
                            continue          # renamed between the listing and the open: the next look
                        with prog.lock:
                            prog.current = (pending[etag], lambda e=etag, p=path: [p, os.path.join(inbox, e)])
                    if n != etag:
                        moved += arriving[etag].read()
                        if arriving[etag].seen > pending[etag].size:   # more than the hub's size: stop now
                            bad = (pending[etag], oversize(pending[etag]))
                            break
                        continue
                    # rsync named it: complete and closed
                    entry = pending.pop(etag)
                    seen, digest = arriving.pop(etag).finish(path)
                    wrong = verdict(entry, seen, digest)
                    if wrong:
                        bad = (entry, wrong)
                        break
                    os.chmod(path, 0o644)
                    os.rename(path, hc.blob_path(rdir, etag))
                    got += 1
                    moved += 1
                    with prog.lock:
                        prog.current = None
                    on_verified(entry)
                if bad is not None or (ended and not moved):
                    break
                if moved:
                    last = time.time()
                elif stalled(last, t):
                    stuck = True
                    break
                else:
                    time.sleep(0.02)
        finally:
            for a in arriving.values():
                a.close()
            stop_rsync(proc)
            with prog.lock:
                prog.current = None
            clear_inbox(rdir)
            err.seek(0)
            said = err.read().strip()[-4000:]
    for path in (names, errfile):
        if os.path.exists(path):
            os.unlink(path)
    if bad is not None:
        return got, 'hash', bad[1], bad[0]
    if stuck:
        return got, 'stalled', stall_detail(t), None
    if proc.returncode == 0:
        return got, None, None, None
    # 23: some of the names are not there (the source lacks them yet); the others came
    if proc.returncode == 23 and 'No such file' in said:
        return got, None if got else 'missing', None, None
    return got, 'rsync', 'rsync rc %d: %s' % (proc.returncode, err_line(said)), None


def receive_relay(src, name, rdir, entries, prog, on_verified):
    """Take one blob of entries from name's relay (inkling.fleet's hf_peer_relay), streamed while name itself
    still receives it: written to ``.inkling/incoming/ETAG.part`` (which this host's own relay streams on to its
    receivers as it grows) and hashed as it arrives; moved to ``blobs/ETAG`` and ``on_verified(entry)`` called
    once its size and hash are the hub's.

    Returns ``(got, kind, detail, entry)`` like receive_batch: got 1 or 0; kind None (a blob came), ``'missing'``
    (the source held none of them within its hold time; detail ``'ended'``: it stopped streaming the blob, because
    its own transfer of it stalled or failed, or it went away), ``'gone'`` (its relay answered before in this run
    and now cannot be reached), ``'relay'`` (its relay could not be used: refused, not
    running, not answering; detail says why: the copy falls back to rsync for this source), ``'rsync'`` (the
    connection broke), ``'stalled'`` (no byte for switch_after_s + STALL_GRACE_S) or ``'hash'``."""
    t = src.p['switch_after_s']
    pending = dict((e.etag, e) for e in entries)
    try:
        stream = hf_peer_relay.Stream(src.addr[name], src.p['relay_port'], src.p['secret'],
                                      [(e.etag, e.size) for e in entries], t + STALL_GRACE_S)
    except hf_peer_relay.RelayError as exc:
        if exc.kind == 'connect' and name in src.answered:
            # its relay answered with this run's secret before and runs in the unit of its rsync daemon: the host,
            # or its daemon's unit, is gone (a killed relay host: drop it now, before the hosts behind this one
            # give up waiting on it)
            return 0, 'gone', str(exc), None
        return 0, 'relay', str(exc), None
    # it answered with this run's secret: from now on it has switch_after_s to answer (as after a listing)
    src.answered.add(name)
    src.silent_since.pop(name, None)
    if stream.etag is None:
        stream.close()
        return 0, 'missing', None, None
    entry = pending.get(stream.etag)
    if entry is None:
        stream.close()
        return 0, 'relay', 'its relay offered %s, which this host did not ask for' % stream.etag, None
    inbox = inbox_dir(rdir)
    if not os.path.isdir(inbox):
        os.makedirs(inbox)
    part = hf_peer_relay.part_path(inbox, entry.etag)
    if os.path.lexists(part):
        os.unlink(part)        # never truncated in place: this host's relay may still stream that file
    hasher = hc.new_hasher(entry)
    seen, why = 0, None
    with prog.lock:
        prog.current = (entry, lambda: [part])
    try:
        with os.fdopen(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), 'wb', 0) as out:
            while seen < entry.size:
                try:
                    data = stream.read(min(READ_CHUNK, entry.size - seen))
                except socket.timeout:
                    why = 'stalled'
                    break
                except (OSError, socket.error) as exc:
                    why = 'broken: %s' % exc
                    break
                if not data:
                    # the source stopped streaming it: its own transfer of it stalled or failed verification
                    why = 'ended'
                    break
                out.write(data)
                hasher.update(data)
                seen += len(data)
    finally:
        stream.close()
        with prog.lock:
            prog.current = None
    if why is not None:
        os.unlink(part)
        if why == 'stalled':
            return 0, 'stalled', stall_detail(t), entry
        if why == 'ended':
            # the source's own transfer of it stalled or failed (or the source ended): ask again at once
            return 0, 'missing', 'ended', None
        return 0, 'rsync', 'the relay stream of %s %s' % (entry.path, why), entry
    wrong = verdict(entry, seen, hasher.hexdigest())
    if wrong:
        os.unlink(part)
        return 0, 'hash', wrong, entry
    os.chmod(part, 0o644)
    os.rename(part, hc.blob_path(rdir, entry.etag))
    on_verified(entry)
    return 1, None, None, None
