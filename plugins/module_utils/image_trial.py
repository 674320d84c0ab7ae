# -*- coding: utf-8 -*-
# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Try a vLLM image on a GPU host without a GPU, before the running server is stopped.

``TRIAL_SCRIPT`` runs inside the image (``python3 -c``): it reads PyTorch's version, CUDA version and the
architectures the build carries kernels for (``torch._C._cuda_getArchFlags()``: ``torch.cuda.get_arch_list()``
is ``[]`` when no GPU is visible), vLLM's version, and passes the unit's arguments through vLLM's own
command line (``vllm.entrypoints.cli.main.main`` with the serve command's dispatch replaced, so the parser and
the subcommand's ``validate`` run and nothing starts). It prints one line ``INKLING_IMAGE_TRIAL <json>``.

The rest are pure functions: the podman command line, reading the script's answer, whether the arch list
covers the host's compute capability, whether the trial can be skipped, and the verdict with its message.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import re

MARKER = 'INKLING_IMAGE_TRIAL '

TRIAL_SCRIPT = r'''
import contextlib, io, json, os, sys
payload = json.loads(sys.argv[1])
out = {"python": sys.version.split()[0]}
try:
    import torch
    out["torch_version"] = str(torch.__version__)
    out["cuda_version"] = getattr(torch.version, "cuda", None)
    flags = torch._C._cuda_getArchFlags()
    out["arch_list"] = flags.split() if isinstance(flags, str) else [str(f) for f in (flags or [])]
except Exception as exc:
    out["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
try:
    import vllm
    out["vllm_version"] = str(getattr(vllm, "__version__", "unknown"))
except Exception as exc:
    out["vllm_error"] = "%s: %s" % (type(exc).__name__, exc)
entry = [os.path.basename(str(e)) for e in payload.get("entrypoint") or []]
argv = list(payload.get("args") or [])
err = io.StringIO()
parsed = {}
try:
    if entry[:1] == ["vllm"] or not entry:
        from vllm.entrypoints.cli import serve as serve_cli
        def _parsed_only(args):
            parsed["ok"] = True
        serve_cli.ServeSubcommand.cmd = staticmethod(_parsed_only)
        from vllm.entrypoints.cli.main import main as vllm_main
        sys.argv = ["vllm"] + (entry[1:] if entry else ["serve"]) + argv
        out["parser"] = "vllm.entrypoints.cli.main"
        with contextlib.redirect_stderr(err):
            vllm_main()
    elif "vllm.entrypoints.openai.api_server" in entry:
        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser
        except ImportError:
            from vllm.utils import FlexibleArgumentParser
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
        parser = make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
        out["parser"] = "vllm.entrypoints.openai.cli_args.make_arg_parser"
        with contextlib.redirect_stderr(err):
            validate_parsed_serve_args(parser.parse_args(argv))
        parsed["ok"] = True
    else:
        out["args_error"] = "the image's entrypoint %s is not vLLM's" % payload.get("entrypoint")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
    if code:
        lines = [l for l in (err.getvalue() or str(exc.code or "")).splitlines() if l.strip()]
        out["args_error"] = lines[-1] if lines else "exit %s" % code
except Exception as exc:
    out["args_error"] = "%s: %s" % (type(exc).__name__, exc)
out["args_ok"] = bool(parsed.get("ok")) and "args_error" not in out
sys.stdout.write("\n" + "INKLING_IMAGE_TRIAL " + json.dumps(out) + "\n")
'''


def digest_of(reference):
    """'repo@sha256:abc' or 'sha256:abc' -> 'sha256:abc'; None otherwise."""
    match = re.search(r'(sha256:[0-9a-f]{64})', reference or '')
    return match.group(1) if match else None


def podman_argv(podman, image, args, env=None, volumes=None, podman_args=None, entrypoint=None, python='python3'):
    """The trial's command line: the image with the unit's environment and mounts, no network, no device,
    its Python as entrypoint, the script and its payload (the unit's arguments and the image's entrypoint)."""
    argv = [podman, 'run', '--rm', '--pull=never', '--network=none', '--entrypoint=' + python]
    argv += list(podman_args or [])
    for key in sorted(env or {}):
        argv.append('--env=%s=%s' % (key, (env or {})[key]))
    for vol in volumes or []:
        argv.append('--volume=' + vol)
    payload = json.dumps({'args': [str(a) for a in args or []], 'entrypoint': entrypoint})
    return argv + [image, '-c', TRIAL_SCRIPT, payload]


def parse_output(stdout):
    """The script's answer (the last marker line), or None."""
    found = None
    for line in (stdout or '').splitlines():
        if line.startswith(MARKER):
            try:
                found = json.loads(line[len(MARKER):])
            except ValueError:
                continue
    return found


def _cap(cap):
    match = re.match(r'^(\d+)\.(\d+)$', str(cap or ''))
    return (int(match.group(1)), int(match.group(2))) if match else None


def arch_support(cap, arch_list):
    """How a build with ``arch_list`` (``sm_90``, ``sm_90a``, ``sm_100f``, ``compute_90``) runs on compute
    capability ``cap`` ('9.0'): ``('native', 'sm_90')``, ``('compatible', 'sm_80')`` (a cubin of the same
    major and a lower minor: binary compatible), ``('ptx', 'compute_80')`` (only PTX: JIT-compiled at every
    start) or ``('none', None)``."""
    want = _cap(cap)
    if want is None:
        return 'none', None
    compatible = ptx = None
    for arch in arch_list or []:
        match = re.match(r'^(sm|compute)_(\d+?)(\d)([af]?)$', str(arch))
        if not match:
            continue
        kind, major, minor, suffix = match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)
        if kind == 'sm' and (major, minor) == want:
            return 'native', arch
        if kind == 'sm' and major == want[0] and minor < want[1] and suffix != 'a':
            compatible = compatible or arch
        if kind == 'compute' and (major, minor) <= want:
            ptx = ptx or arch
    if compatible:
        return 'compatible', compatible
    if ptx:
        return 'ptx', ptx
    return 'none', None


def sm_name(cap):
    want = _cap(cap)
    return 'sm_%d%d' % want if want else str(cap)


def should_skip(image, args, running_image=None, running_args=None, env=None, running_env=None):
    """True when the running unit already serves this exact image digest with these arguments and
    this environment: the image was tried when it was deployed. A new environment (``env``) with no
    known running one is not skipped: an upgrade that changes only the environment (a kernel or
    backend switch) is tried like any other."""
    mine, theirs = digest_of(image), digest_of(running_image)
    if not mine or not theirs or mine != theirs or running_args is None:
        return False
    if [str(a) for a in args or []] != [str(a) for a in running_args]:
        return False
    if env is not None and (running_env is None or _env(env) != _env(running_env)):
        return False
    return True


def _env(env):
    return dict((str(k), str(v)) for k, v in dict(env).items())


def _versions(answer):
    parts = []
    if answer.get('vllm_version'):
        parts.append('vLLM %s' % answer['vllm_version'])
    if answer.get('torch_version'):
        parts.append('PyTorch %s' % answer['torch_version'])
    if answer.get('cuda_version'):
        parts.append('CUDA %s' % answer['cuda_version'])
    return ', '.join(parts) or 'no vLLM or PyTorch found'


def judge(host, image, answer, compute_caps, rc=0, stderr=''):
    """The verdict: ``{'ok', 'failures': [{'check', 'message', 'remedy'}], 'message'}``."""
    failures = []
    if answer is None:
        tail = [l for l in (stderr or '').splitlines() if l.strip()][-3:]
        failures.append({'check': 'image.run', 'message': 'the image did not run the trial (podman rc=%s): %s'
                                                          % (rc, ' | '.join(tail) or 'no output'),
                         'remedy': 'check that the image is on the host (the image role pulls it) and has python3'})
        return _verdict(host, image, None, failures)
    versions = _versions(answer)
    if answer.get('torch_error'):
        failures.append({'check': 'image.torch', 'message': 'PyTorch in the image cannot be imported: %s'
                                                            % answer['torch_error'],
                         'remedy': 'use a vLLM image whose PyTorch imports without a GPU'})
    else:
        arch_list = answer.get('arch_list') or []
        for cap in compute_caps or []:
            kind, match = arch_support(cap, arch_list)
            if kind in ('native', 'compatible'):
                continue
            found = ' '.join(arch_list) or 'nothing'
            why = ('only PTX %s, which the driver would JIT-compile at every start' % match) if kind == 'ptx' \
                else 'no kernels for it'
            failures.append({
                'check': 'image.arch',
                'message': 'PyTorch %s (CUDA %s) in the image was built for %s: %s for this host\'s compute '
                           'capability %s (%s); vLLM would fail after the stop with "no kernel image is available '
                           'for execution on the device"' % (answer.get('torch_version'), answer.get('cuda_version'),
                                                             found, why, cap, sm_name(cap)),
                'remedy': 'use an image whose PyTorch is built for %s (TORCH_CUDA_ARCH_LIST with %s), or keep '
                          'the running image' % (sm_name(cap), cap)})
    if answer.get('vllm_error'):
        failures.append({'check': 'image.vllm', 'message': 'vLLM in the image cannot be imported: %s'
                                                           % answer['vllm_error'],
                         'remedy': 'use a vLLM image (its python3 must import vllm)'})
    elif not answer.get('args_ok'):
        failures.append({'check': 'image.args',
                         'message': '%s rejects the unit\'s arguments: %s' % (
                             'vLLM %s' % answer.get('vllm_version', '?'), answer.get('args_error') or 'unknown error'),
                         'remedy': 'change the variant\'s vllm_args for this vLLM version '
                                   '(inkling_variant_overrides), or use an image whose vLLM accepts them'})
    return _verdict(host, image, answer, failures, versions)


def _verdict(host, image, answer, failures, versions=None):
    if not failures:
        message = 'image trial on %s passed: %s, arch %s, vLLM accepts the arguments' % (
            host, versions, ' '.join((answer or {}).get('arch_list') or []))
    else:
        lines = ['image trial on %s failed for %s (%s); the running server was not stopped:'
                 % (host, image, versions or 'the image did not answer')]
        for fail in failures:
            lines.append('- [%s] %s; remedy: %s' % (fail['check'], fail['message'], fail['remedy']))
        message = '\n'.join(lines)
    return {'ok': not failures, 'failures': failures, 'message': message}


# The options of inkling.fleet.image_trial (its DOCUMENTATION describes them).
ARGUMENT_SPEC = dict(
    host=dict(type='str', required=True),
    image=dict(type='str', required=True),
    args=dict(type='list', elements='str', required=True),
    env=dict(type='dict', default={}),
    volumes=dict(type='list', elements='str', default=[]),
    podman_args=dict(type='list', elements='str', default=[]),
    compute_caps=dict(type='list', elements='str', required=True),
    running_image=dict(type='str'),
    running_args=dict(type='list', elements='str'),
    running_env=dict(type='dict'),
    podman_path=dict(type='str', default='podman'),
    python=dict(type='str', default='python3'),
    timeout=dict(type='int', default=600),
)
