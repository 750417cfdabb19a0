"""Two "hosts" on this machine for the collective tests: two network
namespaces joined by one veth link, each with one address on that link
(10.231.R.1/24 .. 10.231.R.2/24, R random) and its loopback, made and
removed by the test. ``Hosts.unavailable()`` says why they cannot be made
here (not root, no ``ip``, namespaces forbidden), for a skip."""

import os
import random
import shutil
import subprocess


class Hosts:
    """Two namespaces ``names[0]``, ``names[1]`` with addresses ``addresses``
    on the veth ends ``links``."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}{random.randrange(1000)}"
        self.names = [f"mf{tag}a", f"mf{tag}b"]
        self.links = [f"mfv{tag}a", f"mfv{tag}b"]
        subnet = random.randrange(1, 250)
        self.addresses = [f"10.231.{subnet}.1", f"10.231.{subnet}.2"]
        self._made = []

    @staticmethod
    def unavailable():
        """Why namespaces cannot be made here, or None."""
        if shutil.which("ip") is None:
            return "the `ip` command (iproute2) is not installed"
        if os.geteuid() != 0:
            return "making network namespaces and veth links needs root"
        probe = f"mfprobe{os.getpid()}"
        done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
        if done.returncode != 0:
            return f"this sandbox forbids network namespaces (`ip netns add`: " \
                   f"{done.stderr.strip()})"
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
        return None

    def _ip(self, *args):
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)

    def __enter__(self):
        try:
            for name in self.names:
                self._ip("netns", "add", name)
                self._made.append(name)
            self._ip("link", "add", self.links[0], "type", "veth", "peer", "name", self.links[1])
            for name, link, address in zip(self.names, self.links, self.addresses):
                self._ip("link", "set", link, "netns", name)
                self._ip("-n", name, "addr", "add", f"{address}/24", "dev", link)
                self._ip("-n", name, "link", "set", link, "up")
                self._ip("-n", name, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for name in self._made:  # the veth pair goes with its namespaces
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made = []
        return False

    def cut(self, host):
        """Takes ``host``'s end of the link down: it is cut off."""
        self._ip("-n", self.names[host], "link", "set", self.links[host], "down")

    def popen(self, host, argv, env, **kwargs):
        """Starts ``argv`` inside ``host``'s namespace."""
        return subprocess.Popen(["ip", "netns", "exec", self.names[host], *argv], env=env,
                                **kwargs)
