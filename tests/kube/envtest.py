"""A real Kubernetes control plane for integration tests (envtest style).

``EnvTest`` starts etcd, kube-apiserver and kube-controller-manager from an
envtest assets directory (``KUBEBUILDER_ASSETS``, see
``hack/envtest-assets.sh``), all on loopback with free ports and a temporary
directory, and writes a kubeconfig that authenticates as cluster-admin
(static bearer token in group ``system:masters``)::

    with EnvTest() as env:
        client = kubernetes.config.new_client_from_config(str(env.kubeconfig_path))

Each process runs in its own process group, logs to a file in the temporary
directory, and is killed (with its group) on exit. A start failure raises
``EnvTestError`` whose message ends with the tail of the relevant log.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "DEFAULT_CONTROLLERS",
    "REQUIRED_BINARIES",
    "EnvTest",
    "EnvTestError",
    "assets_ok",
    "default_cache_assets_dir",
    "find_assets",
]

REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")

# Controllers needed for Deployments/ReplicaSets, garbage collection and
# namespace deletion (plus a few cheap workload controllers).
DEFAULT_CONTROLLERS = (
    "deployment",
    "replicaset",
    "garbagecollector",
    "namespace",
    "serviceaccount",
    "job",
    "statefulset",
    "daemonset",
    "replicationcontroller",
)

_LOG_TAIL_LINES = 40


class EnvTestError(RuntimeError):
    """The control plane could not be found or started."""


def default_cache_assets_dir() -> Path:
    """Where ``hack/envtest-assets.sh`` caches its Debian-source build."""
    root = os.environ.get("LLMSIM_CACHE_DIR") or str(Path.home() / ".cache" / "llmsim")
    return Path(root) / "envtest" / "1.20.2-debian-r2"


def assets_ok(path: str | os.PathLike[str] | None) -> bool:
    """True when ``path`` holds executable etcd, kube-apiserver and kube-controller-manager."""
    if not path:
        return False
    p = Path(path)
    return all(os.access(p / b, os.X_OK) and (p / b).is_file() for b in REQUIRED_BINARIES)


def find_assets(assets_dir: str | os.PathLike[str] | None = None) -> Path:
    """Resolve the assets directory: explicit argument, ``KUBEBUILDER_ASSETS``, then the cache.

    Raises ``EnvTestError`` with instructions when none holds the binaries.
    """
    candidates: list[tuple[str, str | os.PathLike[str] | None]] = []
    if assets_dir is not None:
        candidates.append(("argument", assets_dir))
    else:
        candidates.append(("KUBEBUILDER_ASSETS", os.environ.get("KUBEBUILDER_ASSETS")))
        candidates.append(("cache", default_cache_assets_dir()))
    for _, cand in candidates:
        if cand is not None and assets_ok(cand):
            return Path(cand).resolve()
    tried = ", ".join(f"{src}={str(cand) if cand else '<unset>'}" for src, cand in candidates)
    raise EnvTestError(
        f"no envtest assets ({', '.join(REQUIRED_BINARIES)}) found (tried {tried}); "
        'run `export KUBEBUILDER_ASSETS="$(hack/envtest-assets.sh)"` first'
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _write_pem(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.write_bytes(data)
    path.chmod(mode)


def _key_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _make_pki(
    certs: Path,
) -> tuple[Path, Path, Path, Path, Path]:
    """Write a CA, an apiserver serving cert/key and a service-account key.

    Returns (ca_crt, serving_crt, serving_key, sa_key, sa_pub).
    """
    now = datetime.datetime.now(datetime.UTC)
    not_before = now - datetime.timedelta(hours=1)
    not_after = now + datetime.timedelta(days=7)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "llmsim-envtest-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(srv_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    ca_crt = certs / "ca.crt"
    serving_crt = certs / "apiserver.crt"
    serving_key = certs / "apiserver.key"
    sa_key_path = certs / "sa.key"
    sa_pub = certs / "sa.pub"
    _write_pem(ca_crt, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write_pem(serving_crt, srv_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write_pem(serving_key, _key_pem(srv_key))
    _write_pem(sa_key_path, _key_pem(sa_key))
    _write_pem(
        sa_pub,
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
        0o644,
    )
    return ca_crt, serving_crt, serving_key, sa_key_path, sa_pub


class _Proc:
    """A child process in its own process group, logging to a file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, cwd: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if self.popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=grace)
        # The leader may be gone while children of its group survive.
        self._signal_group(signal.SIGKILL)
        if self.popen.poll() is None:
            self.popen.wait(timeout=grace)
        self._log.close()

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)


class EnvTest:
    """etcd + kube-apiserver + kube-controller-manager on loopback, as a context manager.

    After ``start()`` (or ``__enter__``) these attributes are set:

    - ``kubeconfig_path``: kubeconfig authenticating as cluster-admin;
    - ``server_url``: ``https://127.0.0.1:<port>``;
    - ``token``: the bearer token (user ``envtest-admin``, group ``system:masters``);
    - ``ca_path``: the CA certificate that signed the apiserver's serving cert;
    - ``tmpdir``: the temporary directory holding certs, data and ``*.log`` files;
    - ``etcd_url``: etcd's client URL.
    """

    def __init__(
        self,
        assets_dir: str | os.PathLike[str] | None = None,
        *,
        start_controller_manager: bool = True,
        controllers: Sequence[str] = DEFAULT_CONTROLLERS,
        startup_timeout: float = 120.0,
        extra_apiserver_args: Sequence[str] = (),
        extra_controller_manager_args: Sequence[str] = (),
        keep_tmpdir: bool = False,
    ) -> None:
        self.assets_dir = find_assets(assets_dir)
        self.start_controller_manager = start_controller_manager
        self.controllers = tuple(controllers)
        self.startup_timeout = startup_timeout
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self.extra_controller_manager_args = tuple(extra_controller_manager_args)
        self.keep_tmpdir = keep_tmpdir

        self.tmpdir: Path | None = None
        self.kubeconfig_path: Path = Path()
        self.server_url: str = ""
        self.token: str = ""
        self.ca_path: Path = Path()
        self.etcd_url: str = ""
        self._procs: list[_Proc] = []
        self._ssl: ssl.SSLContext | None = None

    # -- context manager -----------------------------------------------------

    def __enter__(self) -> EnvTest:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> EnvTest:
        if self.tmpdir is not None:
            raise EnvTestError("EnvTest already started")
        attempts = 3
        for attempt in range(1, attempts + 1):
            self.tmpdir = Path(tempfile.mkdtemp(prefix="llmsim-envtest-"))
            try:
                self._start_all(self.tmpdir)
                return self
            except EnvTestError as exc:
                self.stop()
                # A "free" port may have been taken by someone else meanwhile.
                if attempt == attempts or "address already in use" not in str(exc):
                    raise
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Kill every process group (controller-manager, apiserver, etcd) and remove the tmpdir."""
        while self._procs:
            self._procs.pop().stop()
        if self.tmpdir is not None and not self.keep_tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
        self.tmpdir = None

    def log_path(self, name: str) -> Path:
        """Log file of ``etcd``, ``kube-apiserver`` or ``kube-controller-manager``."""
        if self.tmpdir is None:
            raise EnvTestError("EnvTest not started")
        return self.tmpdir / f"{name}.log"

    # -- internals -------------------------------------------------------------

    def _bin(self, name: str) -> str:
        return str(self.assets_dir / name)

    def _start_all(self, tmp: Path) -> None:
        certs = tmp / "certs"
        certs.mkdir(mode=0o700)
        ca_crt, srv_crt, srv_key, sa_key, sa_pub = _make_pki(certs)
        self.ca_path = ca_crt
        self._ssl = ssl.create_default_context(cafile=str(ca_crt))

        self.token = secrets.token_hex(24)
        tokens = tmp / "tokens.csv"
        tokens.write_text(f'{self.token},envtest-admin,envtest-admin,"system:masters"\n')
        tokens.chmod(0o600)

        self._start_etcd(tmp)

        port = free_port()
        self.server_url = f"https://127.0.0.1:{port}"
        self._start_apiserver(tmp, port, ca_crt, srv_crt, srv_key, sa_key, sa_pub, tokens)

        self.kubeconfig_path = tmp / "kubeconfig"
        self._write_kubeconfig(self.kubeconfig_path)

        if self.start_controller_manager:
            self._start_controller_manager(tmp)

    def _spawn(self, name: str, argv: Sequence[str], tmp: Path) -> _Proc:
        proc = _Proc(name, argv, tmp / f"{name}.log", tmp)
        self._procs.append(proc)
        return proc

    def _wait(self, proc: _Proc, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if not proc.alive():
                raise EnvTestError(
                    f"{proc.name} exited with code {proc.popen.returncode} while waiting for {what}; "
                    f"tail of {proc.log_path}:\n{_tail(proc.log_path)}"
                )
            try:
                if check():
                    return
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise EnvTestError(
                    f"timed out after {self.startup_timeout:.0f}s waiting for {what}; "
                    f"tail of {proc.log_path}:\n{_tail(proc.log_path)}"
                )
            time.sleep(0.25)

    def _get(
        self,
        url: str,
        *,
        context: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> tuple[int, bytes]:
        req = urllib.request.Request(url)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=5, context=context) as resp:
                status: int = resp.status
                return status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def _start_etcd(self, tmp: Path) -> None:
        data = tmp / "etcd-data"
        data.mkdir(mode=0o700)
        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        proc = self._spawn(
            "etcd",
            [
                self._bin("etcd"),
                "--name=envtest",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=envtest={peer_url}",
                "--initial-cluster-state=new",
                "--logger=zap",
                "--log-outputs=stderr",
            ],
            tmp,
        )

        def healthy() -> bool:
            status, body = self._get(f"{self.etcd_url}/health")
            return status == 200 and json.loads(body).get("health") in ("true", True)

        self._wait(proc, "etcd /health", healthy)

    def _start_apiserver(
        self,
        tmp: Path,
        port: int,
        ca_crt: Path,
        srv_crt: Path,
        srv_key: Path,
        sa_key: Path,
        sa_pub: Path,
        tokens: Path,
    ) -> None:
        cert_dir = tmp / "apiserver-certs"
        cert_dir.mkdir(mode=0o700)
        argv = [
            self._bin("kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--advertise-address=127.0.0.1",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--insecure-port=0",
            f"--cert-dir={cert_dir}",
            f"--tls-cert-file={srv_crt}",
            f"--tls-private-key-file={srv_key}",
            f"--client-ca-file={ca_crt}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
            *self.extra_apiserver_args,
        ]
        proc = self._spawn("kube-apiserver", argv, tmp)

        def ready() -> bool:
            status, _ = self._get(f"{self.server_url}/readyz", context=self._ssl, token=self.token)
            if status != 200:
                return False
            status, _ = self._get(f"{self.server_url}/api/v1/namespaces/default", context=self._ssl, token=self.token)
            return status == 200

        self._wait(proc, "kube-apiserver /readyz and namespace default", ready)

    def _write_kubeconfig(self, path: Path) -> None:
        # JSON is valid YAML, so every kubeconfig reader accepts it.
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {
                        "server": self.server_url,
                        "certificate-authority": str(self.ca_path),
                    },
                }
            ],
            "users": [{"name": "envtest-admin", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "envtest",
                    "context": {"cluster": "envtest", "user": "envtest-admin", "namespace": "default"},
                }
            ],
            "current-context": "envtest",
            "preferences": {},
        }
        path.write_text(json.dumps(cfg, indent=2) + "\n")
        path.chmod(0o600)

    def _start_controller_manager(self, tmp: Path) -> None:
        port = free_port()
        kubeconfig = str(self.kubeconfig_path)
        argv = [
            self._bin("kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            f"--controllers={','.join(self.controllers)}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--port=0",
            f"--cert-dir={tmp / 'kcm-certs'}",
            f"--root-ca-file={self.ca_path}",
            "--profiling=false",
            "--v=1",
            *self.extra_controller_manager_args,
        ]
        proc = self._spawn("kube-controller-manager", argv, tmp)
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE

        def healthy() -> bool:
            status, _ = self._get(f"https://127.0.0.1:{port}/healthz", context=insecure)
            return status == 200

        self._wait(proc, "kube-controller-manager /healthz", healthy)
