# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Every relative link in README.md and docs/*.md resolves inside the repository.

Users only have the repository: a Markdown link (``[text](path#anchor)``) must name a file
that exists, and its anchor a heading (GitHub's slug) or an ``<a id>`` of that file. A
Markdown path written as code (`` `docs/operator-guide.md` ``, `` `architecture.md` ``) must
exist too, relative to the repository root or to the page, when it is a path of this
repository (no directory, or one that starts with a top-level directory of the repository; other
repositories' paths quoted as sources are left alone). Links with a scheme (``https:``) are not
followed.
"""

import glob
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = ['README.md'] + sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, 'docs', '*.md')))

FENCE_RE = re.compile(r'^```.*?^```', re.S | re.M)
LINK_RE = re.compile(r'(?<!!)\[[^\]]*\]\(([^)\s]+)\)')
CODE_MD_RE = re.compile(r'`([\w./-]+\.md)`')
HEADING_RE = re.compile(r'^#{1,6}\s+(.*?)\s*#*\s*$', re.M)
ANCHOR_RE = re.compile(r'<a\s+(?:id|name)="([^"]+)"')


def slug(heading):
    """GitHub's anchor for a heading: link targets and code marks dropped, lower case,
    punctuation removed, spaces to hyphens."""
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading)
    text = re.sub(r'[^\w\- ]', '', text.strip().lower())
    return text.replace(' ', '-')


def anchors(text):
    found = set(ANCHOR_RE.findall(text))
    seen = {}
    for heading in HEADING_RE.findall(FENCE_RE.sub('', text)):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else '%s-%d' % (base, count))
        seen[base] = count + 1
    return found


def broken_links(page, repo=REPO):
    """Return 'target: why' for every relative link or Markdown path of page that does not resolve."""
    path = os.path.join(repo, page)
    with open(path) as f:
        text = FENCE_RE.sub('', f.read())
    here = os.path.dirname(path)
    problems = []
    for target in LINK_RE.findall(text):
        if re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', target):
            continue
        file_part, _sep, fragment = target.partition('#')
        dest = os.path.normpath(os.path.join(here, file_part)) if file_part else path
        if not dest.startswith(repo + os.sep) and dest != repo:
            problems.append('%s: points outside the repository' % target)
        elif not os.path.exists(dest):
            problems.append('%s: no such file' % target)
        elif fragment and dest.endswith('.md'):
            with open(dest) as f:
                if fragment not in anchors(f.read()):
                    problems.append('%s: no heading or anchor #%s in %s' % (target, fragment, os.path.relpath(dest, repo)))
    for target in CODE_MD_RE.findall(text):
        top = target.split('/')[0]
        if '/' in target and not os.path.isdir(os.path.join(repo, top)):
            continue
        if not any(os.path.exists(os.path.join(base, target)) for base in (repo, here)):
            problems.append('`%s`: no such file' % target)
    return problems


@pytest.mark.parametrize('page', PAGES)
def test_links_resolve(page):
    assert broken_links(page) == []


def test_the_check_finds_broken_links(tmp_path):
    repo = str(tmp_path)
    os.mkdir(os.path.join(repo, 'docs'))
    with open(os.path.join(repo, 'docs', 'a.md'), 'w') as f:
        f.write('# Title\n\n<a id="f1"></a>\n## F1. One `x`\n')
    with open(os.path.join(repo, 'README.md'), 'w') as f:
        f.write('[ok](docs/a.md) [ok](docs/a.md#f1) [ok](docs/a.md#f1-one-x) [ok](https://example.com/x.md)\n'
                '`docs/a.md` [bad](docs/missing.md) [bad](docs/a.md#nowhere) [bad](../outside/x.md)\n'
                '`docs/operator-guide.md` `other-repo/README.md` `nowhere.md`\n'
                '```\n[in a fence](nowhere.md)\n```\n')
    assert broken_links('README.md', repo) == [
        'docs/missing.md: no such file',
        'docs/a.md#nowhere: no heading or anchor #nowhere in docs/a.md',
        '../outside/x.md: points outside the repository',
        '`docs/operator-guide.md`: no such file',
        '`nowhere.md`: no such file',
    ]


def test_slug_follows_github():
    assert slug('6. Caches and restart time') == '6-caches-and-restart-time'
    assert slug('F8. Container `/dev/shm` too small for NCCL at TP 8') == 'f8-container-devshm-too-small-for-nccl-at-tp-8'
    assert slug('Gates ([F16](field-failures.md#f16))') == 'gates-f16'
