"""Offline stand-in for ansible-test's get-pip bootstrap script.

ansible-test downloads ``get-pip-<version>.py`` from a host our machines cannot
reach, but first looks for a cached copy in ``~/.ansible/test/cache``.
``scripts/test.sh`` puts this file there beside a pip wheel taken from PyPI;
like the real get-pip.py it runs ``pip install --upgrade --force-reinstall``
with the arguments it is given, using pip from that wheel.
"""
import argparse
import glob
import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    wheels = sorted(glob.glob(os.path.join(here, 'pip-*.whl')))
    if not wheels:
        sys.exit('ansible-test-get-pip: no pip wheel beside %s' % here)
    sys.path.insert(0, wheels[-1])
    from pip._internal.cli.main import main as pip_main  # pylint: disable=import-outside-toplevel
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument('--no-setuptools', action='store_true')
    pre.add_argument('--no-wheel', action='store_true')
    dummy, args = pre.parse_known_args()
    sys.exit(pip_main(['install', '--upgrade', '--force-reinstall'] + args))


if __name__ == '__main__':
    main()
