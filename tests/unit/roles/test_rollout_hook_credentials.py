# Copyright: inkling.fleet contributors
# Apache License 2.0 (see LICENSE)
"""Drain and undrain hooks take their credentials from rollout_hook_headers and rollout_hook_stdin (from vault), and
no credential reaches the output, even with -vvv (issue 36, finding 13). Not the environment: -vvv prints it."""

import http.server
import os
import subprocess
import sys
import threading

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SECRET = 'hook-secret-4f9c2a7e'

PLAY = '''- name: A drain hook with credentials
  hosts: gpu-01
  gather_facts: false
  tasks:
    - name: Call the URL hook and run the command hook as the rollout does
      ansible.builtin.include_role:
        name: inkling.fleet.rollout
        tasks_from: hook
      vars:
        __rollout_hook_name: drain
        __rollout_hook_command: "sh -c 'cat > {marker}'"
        __rollout_hook_url: "http://127.0.0.1:{port}/drain/gpu-01"
        rollout_hook_headers: {{Authorization: "Bearer {secret}"}}
        rollout_hook_stdin: "{secret}"
'''


def test_hook_credentials_reach_the_hook_and_never_the_output(tmp_path):
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append((self.path, self.headers.get('Authorization')))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    marker = tmp_path / 'token-seen'
    (tmp_path / 'inventory.yml').write_text('all:\n  hosts:\n    gpu-01:\n      ansible_connection: local\n'
                                            '      ansible_python_interpreter: %s\n' % sys.executable)
    (tmp_path / 'play.yml').write_text(PLAY.format(marker=marker, port=server.server_address[1], secret=SECRET))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1')
    try:
        proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-vvv', '-i',
                               str(tmp_path / 'inventory.yml'), str(tmp_path / 'play.yml')],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    finally:
        server.shutdown()
        server.server_close()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert seen == [('/drain/gpu-01', 'Bearer %s' % SECRET)]
    assert marker.read_text().strip() == SECRET
    assert SECRET not in out
