# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Make the collection importable as ansible_collections.inkling.fleet without ansible-test."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
COLLECTIONS = os.path.join(REPO, 'collections')

for path in (COLLECTIONS, HERE):
    if os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)
