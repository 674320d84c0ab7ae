# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""The variant table: merge overrides, validate, and select one entry for a host.

A variant is one way to serve a model on one kind of GPU host: the image, the vLLM
arguments and environment, the mounts, and what the host must offer (compute
capability, GPU count for the tensor parallel size, total GPU memory, driver floor).
The table is collection data (``data/variants.yml``, read on the controller by
plugins/plugin_utils/variant_table.py); this file holds the
rules. Importable and testable without Ansible running.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import re

from ansible_collections.inkling.fleet.plugins.module_utils.image_ref import ImageRefError, parse_reference

SCHEMA_VERSION = 1

# Compute capabilities known not to work, with why. Checked before the table, so that the
# refusal says why instead of only "no entry".
KNOWN_UNSUPPORTED_CAPS = {
    '12.0': (
        'compute capability 12.0 (SM120: RTX PRO 6000 / RTX 50xx) is known not to work with Inkling: '
        'vLLM issue #51405 (https://github.com/vllm-project/vllm/issues/51405), the FA4 relative-attention '
        'path asserts "Paged KV not supported on SM 12.0" during warmup, after the full weight load '
        '(PR #51560 would reject SM120 up front). Remedy: serve from Hopper (9.0) or Blackwell datacenter GPUs (10.0).'
    ),
}

ENTRY_KEYS = {
    'enabled': 'bool', 'priority': 'int', 'architecture': 'str', 'compute_caps': 'caps',
    'model': 'dict', 'tensor_parallel_size': 'int', 'image': 'dict', 'vllm_args': 'strlist',
    'env': 'strdict', 'mounts': 'list', 'min_driver': 'str', 'served_model_name': 'str',
    'notes': 'strlist', 'sources': 'strlist', 'description': 'str',
    'nodes_per_replica': 'int', 'node_args': 'dict', 'modalities': 'strlist',
}
# What a variant's server takes as input; the canary analysis asks only these (docs/rollout.md).
MODALITIES = ('text', 'image', 'audio')
REQUIRED_KEYS = ('architecture', 'compute_caps', 'model', 'tensor_parallel_size', 'image',
                 'vllm_args', 'min_driver', 'served_model_name')
MODEL_KEYS = ('repo_id', 'revision', 'min_total_gpu_memory_mib', 'size_bytes')
IMAGE_KEYS = ('reference', 'digest')
MOUNT_KEYS = ('source', 'target', 'options')
# A multi-node entry (nodes_per_replica > 1) adds per-node arguments: node_args.head (the node
# that serves the API) and node_args.worker (every other node, headless). Placeholders filled
# per host by replica_node_args(): {head_address}, {port}, {node_rank}, {nodes}.
NODE_ROLES = ('head', 'worker')
NODE_PLACEHOLDERS = ('head_address', 'port', 'node_rank', 'nodes')

# The service role adds these itself; a variant must not carry them.
FORBIDDEN_ARGS = ('--model', '--served-model-name', '--host', '--port', '--download-dir',
                  '--hf-cache-dir', '--uds')

ARCHITECTURES = ('hopper', 'blackwell', 'ada', 'ampere')
CAP_RE = re.compile(r'^\d+\.\d+$')
DRIVER_RE = re.compile(r'^\d+(\.\d+){1,2}$')
DIGEST_RE = re.compile(r'^sha256:[0-9a-f]{64}$')


class VariantTableError(Exception):
    """The table (or an override) is wrong; nothing about the host."""

    def __init__(self, errors):
        self.errors = list(errors)
        super(VariantTableError, self).__init__(
            'the variant table is invalid: ' + '; '.join(self.errors))


class VariantRefused(Exception):
    """The host cannot serve the model as asked; ``reasons`` says why, each with a remedy.

    ``refusals`` holds the same reasons as dicts (see ``refusal``): which check of the preflight
    role the reason belongs to, the message and the remedy apart, so that a report can name each
    root cause once.
    """

    def __init__(self, host, refusals):
        self.host = host
        self.refusals = [r if isinstance(r, dict) else refusal('variant', host, r) for r in refusals]
        self.reasons = [r['reason'] for r in self.refusals]
        super(VariantRefused, self).__init__(
            'refused (%d reason(s)): %s' % (len(self.reasons), ' | '.join(self.reasons)))


# The check of inkling.fleet.preflight each kind of refusal belongs to: gpu.count and gpu.mig
# are checks of their own; gpu.memory and driver.version are reported from the refusal; the
# rest (compute capability, no entry) are about the table and stay with the variant check.
REFUSAL_CHECKS = ('gpu.count', 'gpu.mig', 'gpu.memory', 'driver.version', 'variant', 'replica')


def refusal(check, host, reason):
    """One refusal: ``{'check', 'message', 'remedy', 'reason'}`` from a reason written as
    ``'<host>: <what was found>. Remedy: <what to do>.'`` (``reason`` is kept as written)."""
    text = reason
    prefix = '%s: ' % host
    if text.startswith(prefix):
        text = text[len(prefix):]
    message, _sep, remedy = text.partition(' Remedy: ')
    return {'check': check, 'message': message.strip().rstrip('.'), 'remedy': remedy.strip().rstrip('.'),
            'reason': reason}


def type_name(value):
    """The YAML/JSON type name of a value: 'dict', 'list', 'str'... also for the tagged subclasses
    Ansible 2.19 hands a plugin (_AnsibleTaggedList is a list)."""
    for base in (bool, dict, list, str, int, float):
        if isinstance(value, base):
            return base.__name__
    return 'null' if value is None else type(value).__name__


def deep_merge(base, override):
    """Return base updated recursively with override: dicts merge, anything else (lists too) replaces."""
    result = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def merge_overrides(layers):
    """Merge override layers in order (later wins), per variant and per key: dicts merge
    recursively, lists and scalars replace. ``layers``: a list of (name, overrides) pairs; a
    layer that is not a dict of dicts raises VariantTableError naming it."""
    merged = {}
    errors = []
    for name, layer in layers:
        if layer in (None, {}):
            continue
        if not isinstance(layer, dict):
            errors.append('%s must be a dict keyed by variant name, got %s' % (name, type_name(layer)))
            continue
        for variant, override in layer.items():
            if not isinstance(override, dict):
                errors.append('%s: override %r must be a dict, got %s' % (name, variant, type_name(override)))
                continue
            merged[variant] = deep_merge(merged.get(variant, {}), override)
    if errors:
        raise VariantTableError(errors)
    return merged


def merge_table(table, overrides):
    """Merge overrides into the table by entry name; a name not in the table adds an entry."""
    errors = []
    if not isinstance(table, dict):
        raise VariantTableError(['the table must be a dict keyed by variant name, got %s' % type_name(table)])
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        raise VariantTableError(['the overrides must be a dict keyed by variant name, got %s'
                                 % type_name(overrides)])
    merged = copy.deepcopy(table)
    for name, override in overrides.items():
        if not isinstance(override, dict):
            errors.append('override %r must be a dict, got %s' % (name, type_name(override)))
            continue
        if isinstance(merged.get(name), dict):
            merged[name] = deep_merge(merged[name], override)
        else:
            merged[name] = copy.deepcopy(override)
    if errors:
        raise VariantTableError(errors)
    return merged


def is_fully_qualified(reference):
    """True when the reference is one staging accepts: image_ref.parse_reference, the one parser
    of image references (a registry host first, then lowercase path components)."""
    return reference_problem(reference) is None


def reference_problem(reference):
    """None for a reference staging accepts, else image_ref's message saying why not."""
    try:
        parse_reference(reference)
    except ImageRefError as e:
        return str(e)
    return None


def is_revision(value):
    """A hub revision: a 40-hex commit or a git ref name (git-check-ref-format(1), in short)."""
    if not value or re.search(r'[\s~^:?*\[\\]|\.\.|@\{|//', value):
        return False
    return not (value.startswith(('/', '.', '-')) or value.endswith(('/', '.', '.lock')))


COMMIT_RE = re.compile(r'^[0-9a-f]{40}$')
REMOTE_CODE_FLAG = '--trust-remote-code'


def runs_remote_code(entry):
    """True when the entry's vLLM arguments (node_args too) run the model repository's own Python code."""
    args = list(entry.get('vllm_args') or [])
    for role_args in (entry.get('node_args') or {}).values():
        args.extend(role_args or [])
    for arg in args:
        flag, _sep, value = str(arg).partition('=')
        if flag == REMOTE_CODE_FLAG and value.lower() not in ('false', '0', 'no'):
            return True
    return False


def remote_code_problem(name, entry):
    """None, or why an entry that runs remote code is not pinned to a commit (issue 36, finding 6):
    a branch or tag is whatever commit it points to when a host stages, so anyone who can push to the
    repository (or a peer that reports another commit) would choose the code the servers run."""
    if not runs_remote_code(entry):
        return None
    model = entry.get('model') or {}
    revision = model.get('revision')
    if isinstance(revision, str) and COMMIT_RE.match(revision):
        return None
    return ('entry %r: vllm_args have %s, which runs the Python code of %s as the server, but model.revision is %r, '
            'not a 40-hex commit: the code would be whatever commit it names when a host stages. Remedy: pin '
            'model.revision to the commit you validated, in lower case (inkling_variant_overrides: {%s: {model: '
            '{revision: <40-hex>}}}; the hub\'s commit of a branch: GET <hub>/api/models/%s/revision/%s, field sha), '
            'or disable the entry (enabled: false); docs/variants.md, "Pinned revisions"'
            % (name, REMOTE_CODE_FLAG, model.get('repo_id'), revision, name, model.get('repo_id'), revision or 'main'))


def unpinned_candidates(table, model, tensor_parallel_size):
    """remote_code_problem of every enabled entry a host could be given for this model and tensor parallel size
    (what play 0 checks once, before any host is touched)."""
    problems = []
    for name in sorted(table):
        entry = table[name]
        if not (isinstance(entry, dict) and entry.get('enabled', True)):
            continue
        if (entry.get('model') or {}).get('repo_id') != model or entry.get('tensor_parallel_size') != tensor_parallel_size:
            continue
        problem = remote_code_problem(name, entry)
        if problem:
            problems.append(problem)
    return problems


def version_tuple(version):
    return tuple(int(part) for part in re.findall(r'\d+', version or ''))


def _type_ok(kind, value):
    if kind == 'bool':
        return isinstance(value, bool)
    if kind == 'int':
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == 'str':
        return isinstance(value, str) and value != ''
    if kind == 'dict':
        return isinstance(value, dict)
    if kind == 'list':
        return isinstance(value, list)
    if kind == 'strlist':
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == 'strdict':
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    if kind == 'caps':
        return isinstance(value, list) and value != [] and all(isinstance(v, str) and CAP_RE.match(v) for v in value)
    return False


KIND_WORDS = {
    'bool': 'true or false', 'int': 'an integer', 'str': 'a non-empty string', 'dict': 'a dict',
    'list': 'a list', 'strlist': 'a list of strings (quote numbers)', 'caps': 'a non-empty list of "X.Y" strings',
    'strdict': 'a dict of string to string (quote numbers, e.g. "1")',
}


def validate_entry(name, entry):
    """Return a list of error strings for one enabled entry (empty when valid): every bad key at once.
    A key that is missing or of the wrong type is reported once and skips only the checks that read it."""
    errors = []
    where = 'entry %r' % name
    if not isinstance(entry, dict):
        return ['%s must be a dict, got %s' % (where, type_name(entry))]
    for key in sorted(set(entry) - set(ENTRY_KEYS)):
        errors.append('%s: unknown key %r (known: %s)' % (where, key, ', '.join(sorted(ENTRY_KEYS))))
    bad = set()
    for key in REQUIRED_KEYS:
        if key not in entry:
            errors.append('%s: missing %r' % (where, key))
            bad.add(key)
    for key, kind in ENTRY_KEYS.items():
        if key in entry and entry[key] is not None and not _type_ok(kind, entry[key]):
            errors.append('%s: %s must be %s, got %r' % (where, key, KIND_WORDS[kind], entry[key]))
            bad.add(key)
        elif key in entry and entry[key] is None and key in REQUIRED_KEYS:
            errors.append('%s: %s must not be null' % (where, key))
            bad.add(key)

    def usable(*keys):
        return not bad.intersection(keys)

    if usable('architecture') and entry['architecture'] not in ARCHITECTURES:
        errors.append('%s: architecture %r is not one of %s' % (where, entry['architecture'], ', '.join(ARCHITECTURES)))
    if usable('tensor_parallel_size') and entry['tensor_parallel_size'] < 1:
        errors.append('%s: tensor_parallel_size must be >= 1' % where)
    for mod in (entry.get('modalities') or []) if usable('modalities') else []:
        if mod not in MODALITIES:
            errors.append('%s: modalities: %r is not one of %s' % (where, mod, ', '.join(MODALITIES)))
    if usable('min_driver') and not DRIVER_RE.match(entry['min_driver']):
        errors.append('%s: min_driver %r is not a driver version like "580.65.06"' % (where, entry['min_driver']))
    if usable('model'):
        errors.extend(_validate_model(where, entry['model']))
    if usable('image'):
        errors.extend(_validate_image(where, entry['image']))
    if usable('vllm_args'):
        errors.extend(_validate_args(where, entry, check_tp=usable('tensor_parallel_size')))
    if usable('nodes_per_replica', 'node_args'):
        errors.extend(_validate_nodes(where, entry))
    if usable('mounts'):
        errors.extend(_validate_mounts(where, entry.get('mounts') or []))
    return errors


def _validate_model(where, model):
    errors = []
    for key in sorted(set(model) - set(MODEL_KEYS)):
        errors.append('%s: model has unknown key %r (known: %s)' % (where, key, ', '.join(MODEL_KEYS)))
    if not isinstance(model.get('repo_id'), str) or not re.match(r'^[\w.-]+/[\w.-]+$', model.get('repo_id') or ''):
        errors.append('%s: model.repo_id must be "owner/name", got %r' % (where, model.get('repo_id')))
    if not isinstance(model.get('revision'), str) or not is_revision(model.get('revision')):
        errors.append('%s: model.revision must be a branch, tag or commit (a git ref: no spaces, none of ~^:?*[\\, '
                      'no ".."), got %r' % (where, model.get('revision')))
    mem = model.get('min_total_gpu_memory_mib')
    if not isinstance(mem, int) or isinstance(mem, bool) or mem < 1:
        errors.append('%s: model.min_total_gpu_memory_mib must be a positive integer, got %r' % (where, mem))
    size = model.get('size_bytes')
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
        errors.append('%s: model.size_bytes must be a positive integer or null, got %r' % (where, size))
    return errors


def _validate_image(where, image):
    errors = []
    for key in sorted(set(image) - set(IMAGE_KEYS)):
        errors.append('%s: image has unknown key %r (known: %s)' % (where, key, ', '.join(IMAGE_KEYS)))
    ref = image.get('reference')
    problem = reference_problem(ref) if isinstance(ref, str) and ref else 'expected a string such as %s' % (
        'docker.io/vllm/vllm-openai:v0.28.0')
    if problem:
        # image_ref's own words: the same parser staging uses (F12 short names, bad tags, uppercase paths)
        errors.append('%s: image.reference %r is not fully qualified: %s' % (where, ref, problem))
    elif '@' in ref:
        errors.append('%s: image.reference %r carries a digest; put the tag in reference and the digest in '
                      'image.digest' % (where, ref))
    digest = image.get('digest')
    if digest is not None and not (isinstance(digest, str) and DIGEST_RE.match(digest)):
        errors.append('%s: image.digest must be null or "sha256:<64 hex>", got %r' % (where, digest))
    return errors


def _validate_args(where, entry, check_tp=True):
    errors = []
    args = entry['vllm_args']
    for arg in args:
        flag = arg.split('=', 1)[0]
        if flag in FORBIDDEN_ARGS:
            errors.append('%s: vllm_args must not contain %s; the service role adds --model, '
                          '--served-model-name, --host and --port itself (set served_model_name instead)'
                          % (where, flag))
    tp_arg = _arg_value(args, '--tensor-parallel-size') or _arg_value(args, '-tp')
    if check_tp and tp_arg is not None and tp_arg != str(entry['tensor_parallel_size']):
        errors.append('%s: vllm_args say --tensor-parallel-size %s but tensor_parallel_size is %s'
                      % (where, tp_arg, entry['tensor_parallel_size']))
    return errors


def _validate_mounts(where, mounts):
    errors = []
    for index, mount in enumerate(mounts):
        if not isinstance(mount, dict):
            errors.append('%s: mounts[%d] must be a dict with source and target' % (where, index))
            continue
        for key in sorted(set(mount) - set(MOUNT_KEYS)):
            errors.append('%s: mounts[%d] has unknown key %r' % (where, index, key))
        for key in ('source', 'target'):
            value = mount.get(key)
            if not isinstance(value, str) or not value.startswith('/'):
                errors.append('%s: mounts[%d].%s must be an absolute path, got %r' % (where, index, key, value))
        if mount.get('options') is not None and not isinstance(mount.get('options'), str):
            errors.append('%s: mounts[%d].options must be a string such as "ro"' % (where, index))
    return errors


def _validate_nodes(where, entry):
    """nodes_per_replica and node_args: both or neither; node_args has head and worker lists."""
    errors = []
    nodes = entry.get('nodes_per_replica')
    node_args = entry.get('node_args')
    if nodes is None or nodes == 1:
        if node_args:
            errors.append('%s: node_args needs nodes_per_replica of 2 or more' % where)
        return errors
    if nodes < 1:
        return ['%s: nodes_per_replica must be >= 1, got %r' % (where, nodes)]
    if not isinstance(node_args, dict):
        return ['%s: nodes_per_replica is %d but node_args is missing (a dict with head and worker argument '
                'lists)' % (where, nodes)]
    for key in sorted(set(node_args) - set(NODE_ROLES)):
        errors.append('%s: node_args has unknown key %r (known: head, worker)' % (where, key))
    for role in NODE_ROLES:
        args = node_args.get(role)
        if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
            errors.append('%s: node_args.%s must be %s, got %r' % (where, role, KIND_WORDS['strlist'], args))
            continue
        for arg in args:
            for name in re.findall(r'\{(\w*)\}', arg):
                if name not in NODE_PLACEHOLDERS:
                    errors.append('%s: node_args.%s: unknown placeholder {%s} in %r (known: %s)' % (
                        where, role, name, arg, ', '.join('{%s}' % p for p in NODE_PLACEHOLDERS)))
    return errors


def replica_node_args(variant, replica):
    """The arguments one node of a replica adds to the variant's vllm_args: node_args.head or
    node_args.worker with {head_address}, {port}, {node_rank} and {nodes} filled in."""
    role = 'head' if replica['node_rank'] == 0 else 'worker'
    values = {'head_address': str(replica['head_address']), 'port': str(replica['port']),
              'node_rank': str(replica['node_rank']), 'nodes': str(len(replica['members']))}
    return [re.sub(r'\{(\w+)\}', lambda m: values[m.group(1)], arg)
            for arg in (variant.get('node_args') or {}).get(role, [])]


def _arg_value(args, flag):
    for position, arg in enumerate(args):
        if arg == flag and position + 1 < len(args):
            return args[position + 1]
        if arg.startswith(flag + '='):
            return arg.split('=', 1)[1]
    return None


def validate_table(table, schema_version):
    """Validate the merged table; raise VariantTableError listing every problem."""
    errors = []
    if schema_version != SCHEMA_VERSION:
        errors.append('the table declares schema_version %r but this collection reads schema_version %d; '
                      'use the variant table shipped with this collection version, or upgrade the collection'
                      % (schema_version, SCHEMA_VERSION))
    if not table:
        errors.append('the table has no entries')
    for name in sorted(table):
        entry = table[name]
        if not isinstance(entry, dict):
            errors.append('entry %r must be a dict, got %s' % (name, type_name(entry)))
            continue
        enabled = entry.get('enabled', True)
        if enabled is not False:
            # An entry whose enabled is not a boolean is checked whole too (validate_entry reports it).
            errors.extend(validate_entry(name, entry))
    if errors:
        raise VariantTableError(errors)


def normalise_entry(name, entry):
    """The variant dict handed to the roles: the entry with its name and every optional key filled."""
    variant = copy.deepcopy(entry)
    variant.pop('enabled', None)
    variant['name'] = name
    variant.setdefault('priority', 0)
    variant['model'].setdefault('size_bytes', None)
    variant['image'].setdefault('digest', None)
    for key, default in (('env', {}), ('mounts', []), ('notes', []), ('sources', [])):
        if variant.get(key) is None:
            variant[key] = default
    variant['mounts'] = [dict(source=m['source'], target=m['target'], options=m.get('options'))
                         for m in variant['mounts']]
    variant.setdefault('description', None)
    # Single-host entries stay as they were (their contract and fingerprint do not change).
    if (variant.get('nodes_per_replica') or 1) == 1:
        variant.pop('nodes_per_replica', None)
        variant.pop('node_args', None)
    return variant


def _gib(mib):
    return '%.1f GiB' % (mib / 1024.0)


def tp_group_memory_mib(gpus, tensor_parallel_size):
    """Memory of the GPUs a TP group would use: the smallest tensor_parallel_size GPUs (all, if fewer)."""
    sizes = sorted(g.get('memory_total_mib') or 0 for g in gpus)
    return sum(sizes[:tensor_parallel_size])


def _nodes(entry):
    return entry.get('nodes_per_replica') or 1


def select_variant(gpu, model, tensor_parallel_size, table, overrides=None, host=None,
                   schema_version=SCHEMA_VERSION, replica=None):
    """Pick the variant for a host. Returns (variant, reasons); raises VariantRefused or VariantTableError.

    ``replica``: the replica the inventory puts this host in, or None: ``{'name', 'members'}``
    (inventory order, head first), ``'gpus'`` (member -> its GPU facts, None when this run has
    none) and ``'head_address'``/``'port'`` (the rendezvous). A multi-node entry
    (``nodes_per_replica`` > 1) is picked only when one host cannot hold the model and the host is
    in a replica; the result's variant then carries ``replica`` (see ``select_replica``).
    """
    host = host or 'this host'
    merged = merge_table(table, overrides)
    validate_table(merged, schema_version)
    if not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
        raise VariantTableError(['tensor_parallel_size must be a positive integer, got %r' % (tensor_parallel_size,)])
    single = dict((n, e) for n, e in merged.items() if _nodes(e) == 1 or not e.get('enabled', True))
    multi = dict((n, e) for n, e in merged.items() if _nodes(e) > 1 and e.get('enabled', True))
    members = list((replica or {}).get('members') or [])
    try:
        variant, reasons = _select_single(gpu, model, tensor_parallel_size, single, host, multi)
    except VariantRefused as exc:
        checks = [r['check'] for r in exc.refusals]
        memory_only = checks and all(c == 'gpu.memory' for c in checks)
        fitting = _multi_candidates(multi, model, gpu, tensor_parallel_size) if 'gpu.memory' in checks else []
        if fitting and len(members) > 1:
            # The host's own problems (GPU count, MIG, ...) stay; memory and the driver floor are
            # the replica's (select_replica checks them against the multi-node entry).
            own = [r for r in exc.refusals if r['check'] not in ('gpu.memory', 'driver.version')]
            return select_replica(gpu, model, tensor_parallel_size, fitting, host, replica, own)
        if not (fitting and memory_only):
            raise
        name, entry = fitting[0]
        hint = ('; or group %d identical hosts into a replica (host variable inkling_replica: <name> on each; '
                'docs/variants.md, "Multi-node replicas"): entry %s serves %s across %d such hosts.'
                % (_nodes(entry), name, model, _nodes(entry)))
        raise VariantRefused(host, [dict(r, **refusal(r['check'], host, r['reason'].rstrip('.') + hint))
                                    for r in exc.refusals])
    if len(members) > 1:
        raise VariantRefused(host, [refusal('variant', host, (
            '%s: the inventory groups this host into replica %s (%s), but one host holds %s (entry %s). Remedy: '
            'remove inkling_replica from these hosts; each serves on its own.'
            % (host, replica.get('name'), ', '.join(members), model, variant['name'])))])
    return variant, reasons


def _multi_candidates(multi, model, gpu, tensor_parallel_size):
    caps = sorted(set(gpu.get('compute_caps') or []))
    if len(caps) != 1:
        return []
    return sorted([(n, e) for n, e in multi.items() if e['model']['repo_id'] == model
                   and caps[0] in e['compute_caps'] and e['tensor_parallel_size'] == tensor_parallel_size],
                  key=lambda item: (-item[1].get('priority', 0), item[0]))


def _gpu_identity(gpu):
    """What must be the same on every member of a replica: GPU model(s), count and driver."""
    names = sorted(set(g.get('name') or '?' for g in gpu.get('gpus') or []))
    return {'gpu model': ', '.join(names) or 'none', 'GPU count': gpu.get('gpu_count', len(gpu.get('gpus') or [])),
            'driver': gpu.get('driver_version') or 'unknown'}


def select_replica(gpu, model, tensor_parallel_size, candidates, host, replica, own_refusals=()):
    """Pick a multi-node entry for a host of a replica, or refuse naming every problem of the
    group: a wrong number of members, a member without GPU facts in this run (unreachable, its
    preflight failed, or left out by --limit), a member whose GPU model, GPU count or driver
    differs from the head's, too little memory over all members, or a driver below the floor."""
    name = replica.get('name')
    members = list(replica['members'])
    gpus = dict(replica.get('gpus') or {})
    gpus[host] = gpu
    refusals = list(own_refusals)

    def refuse(check, reason):
        refusals.append(refusal(check, host, reason))

    chosen_name, chosen = candidates[0]
    nodes = _nodes(chosen)
    if len(members) != nodes:
        refuse('replica', '%s: replica %s has %d host(s) (%s); entry %s needs exactly %d. Remedy: put %d identical '
               'hosts in the replica (inkling_replica: %s on each), no more, no fewer.'
               % (host, name, len(members), ', '.join(members), chosen_name, nodes, nodes, name))
    missing = [m for m in members if not gpus.get(m)]
    if missing:
        refuse('replica', '%s: replica %s is incomplete in this run: no GPU facts from %s (unreachable, its '
               'nvidia-smi failed, or left out by --limit); expected all of %s. Remedy: run with every member of '
               'the replica reachable and included.' % (host, name, ', '.join(missing), ', '.join(members)))
    head = members[0]
    expected = _gpu_identity(gpus[head]) if gpus.get(head) else None
    for member in members[1:]:
        if expected is None or not gpus.get(member):
            continue
        found = _gpu_identity(gpus[member])
        for key in ('gpu model', 'GPU count', 'driver'):
            if found[key] != expected[key]:
                refuse('replica', '%s: replica %s: %s has %s %s, the head %s has %s; the members of a replica must '
                       'be identical (GPU model, GPU count, driver). Remedy: make %s match %s, or move it to '
                       'another replica.' % (host, name, member, key, found[key], head, expected[key], member, head))
    reasons = []
    if not refusals:
        need = chosen['model']['min_total_gpu_memory_mib']
        have = sum(tp_group_memory_mib(gpus[m].get('gpus') or [], tensor_parallel_size) for m in members)
        if have < need:
            refuse('gpu.memory', '%s: the %d hosts of replica %s have %d MiB (%s) in their tensor parallel groups; '
                   '%s (entry %s) needs at least %d MiB (%s). Remedy: use hosts with more GPU memory.'
                   % (host, nodes, name, have, _gib(have), model, chosen_name, need, _gib(need)))
        floor = chosen['min_driver']
        driver = gpu.get('driver_version')
        if version_tuple(driver) < version_tuple(floor):
            refuse('driver.version', '%s: driver %s is older than %s, which entry %s needs (image %s). Remedy: '
                   'upgrade the NVIDIA driver on every member of replica %s to %s or newer.'
                   % (host, driver, floor, chosen_name, chosen['image']['reference'], name, floor))
        reasons = ['%s: one host cannot hold %s; replica %s (%s) has %d identical hosts (%s x %d GPU(s), driver %s) '
                   'with %d MiB; entry %s spans %d nodes' % (
                       host, model, name, ', '.join(members), nodes, expected['gpu model'], expected['GPU count'],
                       expected['driver'], have, chosen_name, nodes)]
    if refusals:
        raise VariantRefused(host, refusals)
    variant = normalise_entry(chosen_name, chosen)
    rank = members.index(host)
    variant['replica'] = {
        'name': name, 'members': members, 'head': head, 'node_rank': rank, 'role': 'head' if rank == 0 else 'worker',
        'head_address': replica.get('head_address') or head, 'port': int(replica.get('port') or 0)}
    variant['replica']['args'] = replica_node_args(variant, variant['replica'])
    return variant, reasons


def _select_single(gpu, model, tensor_parallel_size, merged, host, multi=None):
    """One host serves the model alone (entries with nodes_per_replica 1). ``multi``: the enabled
    multi-node entries, named by a remedy when one of them would take this host."""
    enabled = dict((name, entry) for name, entry in merged.items() if entry.get('enabled', True))
    gpus = gpu.get('gpus') or []
    gpu_count = gpu.get('gpu_count', len(gpus))
    caps = sorted(set(gpu.get('compute_caps') or []))
    refusals = []
    reasons = []

    def refuse(check, reason):
        refusals.append(refusal(check, host, reason))

    if gpu_count == 0:
        refuse('gpu.count', '%s: found no GPU; need %d for tensor parallel size %d. Remedy: check nvidia-smi -L and '
               'the driver.' % (host, tensor_parallel_size, tensor_parallel_size))
    cap = None
    if len(caps) > 1:
        per_cap = {}
        for item in gpus:
            per_cap.setdefault(item.get('compute_cap'), []).append(str(item.get('index')))
        found = ', '.join('%s on GPU %s' % (c, ','.join(idx)) for c, idx in sorted(per_cap.items(), key=lambda kv: version_tuple(kv[0] or '')))
        refuse('variant', '%s: mixed compute capabilities (%s); one vLLM server needs GPUs of one kind. Remedy: '
               'serve from a host with identical GPUs.' % (host, found))
    elif len(caps) == 1:
        cap = caps[0]
    elif gpu_count:
        refuse('variant', '%s: the compute capability is unknown (nvidia-smi did not report compute_cap; driver %s). '
               'Remedy: upgrade the driver to one that reports compute_cap.'
               % (host, gpu.get('driver_version')))

    if cap in KNOWN_UNSUPPORTED_CAPS:
        refuse('variant', '%s: %s' % (host, KNOWN_UNSUPPORTED_CAPS[cap]))

    if gpu_count and gpu_count < tensor_parallel_size:
        advice = 'use a host with %d GPUs' % tensor_parallel_size
        if cap is not None and cap not in KNOWN_UNSUPPORTED_CAPS:
            fixed, text = tensor_parallel_advice(gpu, model, enabled, multi, cap)
            advice = text
        refuse('gpu.count', '%s: found %d GPU(s); tensor parallel size %d needs %d. Remedy: if GPUs are missing, '
               'check nvidia-smi -L, fabric manager and the kernel log for Xid errors; otherwise %s.'
               % (host, gpu_count, tensor_parallel_size, tensor_parallel_size, advice))

    mig = [str(item.get('index')) for item in gpus if item.get('mig_mode_current') or item.get('mig_mode_pending')]
    if mig:
        states = ', '.join('GPU %s current=%s pending=%s' % (
            item.get('index'), _on_off(item.get('mig_mode_current')), _on_off(item.get('mig_mode_pending')))
            for item in gpus if str(item.get('index')) in mig)
        refuse('gpu.mig', '%s: MIG is enabled or pending (%s); vLLM tensor parallelism needs whole GPUs. Remedy: '
               'disable MIG (nvidia-smi -i <gpu> -mig 0) with no GPU process running, then reset the '
               'GPUs or reboot.' % (host, states))

    candidates = []
    if cap is not None and cap not in KNOWN_UNSUPPORTED_CAPS:
        candidates = sorted(
            [(name, entry) for name, entry in enabled.items()
             if entry['model']['repo_id'] == model and cap in entry['compute_caps']
             and entry['tensor_parallel_size'] == tensor_parallel_size],
            key=lambda item: (-item[1].get('priority', 0), item[0]))
        if not candidates:
            refuse('variant', _no_entry_reason(host, enabled, merged, model, cap, tensor_parallel_size, gpu, multi))

    chosen = None
    if candidates:
        if len(candidates) > 1 and candidates[0][1].get('priority', 0) == candidates[1][1].get('priority', 0):
            tied = [n for n, e in candidates if e.get('priority', 0) == candidates[0][1].get('priority', 0)]
            raise VariantTableError([
                'entries %s all match model %s, compute capability %s and tensor parallel size %d with the same '
                'priority %d; give them different priorities or disable all but one'
                % (', '.join(tied), model, cap, tensor_parallel_size, candidates[0][1].get('priority', 0))])
        chosen_name, chosen = candidates[0]
        reasons.append('%s: %d GPU(s), compute capability %s, driver %s; entry %s matches model %s, compute '
                       'capability %s and tensor parallel size %d'
                       % (host, gpu_count, cap, gpu.get('driver_version'), chosen_name, model, cap,
                          tensor_parallel_size))
        if len(candidates) > 1:
            reasons.append('picked %s (priority %d) over %s by priority' % (
                chosen_name, chosen.get('priority', 0),
                ', '.join('%s (priority %d)' % (n, e.get('priority', 0)) for n, e in candidates[1:])))
        skipped = sorted(n for n, e in merged.items() if not e.get('enabled', True)
                         and isinstance(e.get('model'), dict) and e['model'].get('repo_id') == model
                         and cap in (e.get('compute_caps') or []))
        if skipped:
            reasons.append('disabled entries not considered: %s' % ', '.join(skipped))

        need = chosen['model']['min_total_gpu_memory_mib']
        have = tp_group_memory_mib(gpus, tensor_parallel_size)
        used = min(gpu_count, tensor_parallel_size)
        if have < need:
            refuse(
                'gpu.memory',
                '%s: the %d GPU(s) of the tensor parallel group have %d MiB (%s) in total; %s (entry %s) needs at '
                'least %d MiB (%s). Remedy: use GPUs with more memory (for example 8x H200 or 8x B200), or a '
                'smaller model.' % (host, used, have, _gib(have), model, chosen_name, need, _gib(need)))
        else:
            reasons.append('the %d GPU(s) of the tensor parallel group have %d MiB; %s needs %d MiB'
                           % (used, have, model, need))

        driver = gpu.get('driver_version')
        floor = chosen['min_driver']
        if not driver:
            refuse('variant', '%s: the driver version is unknown; entry %s needs driver >= %s. Remedy: check '
                   'nvidia-smi.' % (host, chosen_name, floor))
        elif version_tuple(driver) < version_tuple(floor):
            refuse('driver.version', '%s: driver %s is older than %s, which entry %s needs (image %s). Remedy: upgrade the '
                   'NVIDIA driver (and fabric manager, same version) to %s or newer.'
                   % (host, driver, floor, chosen_name, chosen['image']['reference'], floor))
        else:
            reasons.append('driver %s >= %s' % (driver, floor))

    if refusals:
        if cap is not None and cap not in KNOWN_UNSUPPORTED_CAPS and gpu_count != tensor_parallel_size:
            # For preflight's gpu.count (which wants exactly the host's GPU count): what the table says
            # about the size, whichever reason refused the host.
            advice = tensor_parallel_advice(gpu, model, enabled, multi, cap)[1]
            for item in refusals:
                item['tensor_parallel_advice'] = advice
        raise VariantRefused(host, refusals)
    return normalise_entry(chosen_name, chosen), reasons


def _on_off(value):
    if value is None:
        return 'unknown'
    return 'Enabled' if value else 'Disabled'


def _no_entry_reason(host, enabled, merged, model, cap, tensor_parallel_size, gpu=None, multi=None):
    """Explain why no enabled entry matches, naming what the table does offer."""
    for_model = [(n, e) for n, e in enabled.items() if e['model']['repo_id'] == model]
    if not for_model:
        known = sorted(set(e['model']['repo_id'] for e in enabled.values()))
        disabled = sorted(n for n, e in merged.items() if not e.get('enabled', True)
                          and isinstance(e.get('model'), dict) and e['model'].get('repo_id') == model)
        return ('%s: no enabled variant serves model %s%s; enabled entries serve %s. Remedy: fix the model name, '
                'or add an entry through inkling_variant_overrides.'
                % (host, model, ' (disabled: %s)' % ', '.join(disabled) if disabled else '', ', '.join(known)))
    for_cap = [(n, e) for n, e in for_model if cap in e['compute_caps']]
    if not for_cap:
        caps = sorted(set(c for _n, e in for_model for c in e['compute_caps']), key=version_tuple)
        notes = ''
        if cap == '10.3':
            notes = (' B300/GB300 (10.3) is not listed by the vLLM recipe for %s; no entry claims it.' % model)
        return ('%s: found compute capability %s; no enabled variant of %s supports it (supported: %s).%s Remedy: '
                'run this model on supported GPUs, or add a tested entry through inkling_variant_overrides.'
                % (host, cap, model, ', '.join(caps), notes))
    sizes = sorted(set(e['tensor_parallel_size'] for _n, e in for_cap))
    return ('%s: no enabled variant of %s on compute capability %s uses tensor parallel size %d (entries use %s). '
            'Remedy: %s.'
            % (host, model, cap, tensor_parallel_size, ', '.join(str(s) for s in sizes),
               tensor_parallel_advice(gpu or {}, model, enabled, multi, cap)[1]))


def tensor_parallel_advice(gpu, model, single, multi, cap):
    """What to do about the tensor parallel size on this host, as ``(fixed, text)``. Preflight's
    gpu.count wants exactly the host's GPU count, so the only size worth advising is that count,
    and only when an enabled entry of ``model`` for compute capability ``cap`` uses it and the
    host's GPUs hold the model (``single``: single-host entries; ``multi``: multi-node ones, taken
    as a replica of identical hosts). Otherwise ``fixed`` is False and the text says plainly that
    no setting of inkling_tensor_parallel_size fixes it, and what does (a host with enough such
    GPUs, a replica), never the variant overrides: the count is a host problem."""
    gpus = gpu.get('gpus') or []
    count = gpu.get('gpu_count', len(gpus))
    have = tp_group_memory_mib(gpus, count)
    per_gpu = min([g.get('memory_total_mib') or 0 for g in gpus] or [0])

    def entries(table):
        return sorted([(n, e) for n, e in (table or {}).items() if e.get('enabled', True)
                       and e['model']['repo_id'] == model and cap in e['compute_caps']],
                      key=lambda item: (-item[1].get('priority', 0), item[0]))

    def need(entry):
        return entry['model']['min_total_gpu_memory_mib']

    for name, entry in entries(single):
        if count and entry['tensor_parallel_size'] == count and have >= need(entry):
            return True, ('set inkling_tensor_parallel_size to %d: entry %s serves %s on %d such GPUs'
                          % (count, name, model, count))
    for name, entry in entries(multi):
        if count and entry['tensor_parallel_size'] == count and have * _nodes(entry) >= need(entry):
            return True, ('group %d identical hosts into a replica (host variable inkling_replica: <name> on each; '
                          'docs/variants.md, "Multi-node replicas") and set inkling_tensor_parallel_size to %d: '
                          'entry %s serves %s across %d such hosts'
                          % (_nodes(entry), count, name, model, _nodes(entry)))
    sizes = sorted(set(e['tensor_parallel_size'] for _n, e in entries(single)))
    text = ('this host cannot serve %s alone: no enabled variant for compute capability %s uses its %d GPU(s)%s, '
            'so no setting of inkling_tensor_parallel_size fixes it; '
            % (model, cap, count, (' (entries use tensor parallel size %s)' % ', '.join(str(x) for x in sizes))
               if sizes else ''))
    ways = []
    bigger = sorted(set(e['tensor_parallel_size'] for _n, e in entries(single)
                        if per_gpu * e['tensor_parallel_size'] >= need(e) and e['tensor_parallel_size'] != count))
    if bigger:
        ways.append('serve it from a host with %s such GPUs (and inkling_tensor_parallel_size set to that number)'
                    % ' or '.join(str(x) for x in bigger))
    for name, entry in ([] if bigger else entries(multi)):
        if per_gpu * entry['tensor_parallel_size'] * _nodes(entry) >= need(entry):
            ways.append('group %d identical hosts of %d such GPUs into a replica (entry %s; docs/variants.md, '
                        '"Multi-node replicas")' % (_nodes(entry), entry['tensor_parallel_size'], name))
    # never "add an entry through inkling_variant_overrides" here: a GPU count that no entry serves is a host
    # problem (a missing GPU, the wrong machine), and the table is changed for a tested build, not for a host
    if not ways:
        ways.append('use GPUs with more memory')
    return False, text + '; or '.join(ways)


# The options of inkling.fleet.inkling_variant (its DOCUMENTATION describes them).
ARGUMENT_SPEC = dict(
    gpu=dict(type='dict', required=True),
    model=dict(type='str'),
    tensor_parallel_size=dict(type='int'),
    table=dict(type='dict'),
    schema_version=dict(type='int'),
    overrides=dict(type='dict'),
    host=dict(type='str', default='this host'),
    replica=dict(type='dict', options=dict(
        name=dict(type='str', required=True),
        members=dict(type='list', elements='str', required=True),
        head=dict(type='str'),
        head_address=dict(type='str'),
        port=dict(type='int'),
        gpus=dict(type='dict'),
    )),
)
