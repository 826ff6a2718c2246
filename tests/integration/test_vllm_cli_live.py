"""The real server started with ``vllm serve``'s arguments, over TLS, serving the openai SDK."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.server import ServerProcess, running_server

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A key and a certificate for 127.0.0.1 and localhost, signed by that key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "llmsim test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = folder / "key.pem", folder / "cert.pem"
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


@pytest.fixture(scope="module")
def trust_and_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ssl.SSLContext, ServerProcess]]:
    tmp_path = tmp_path_factory.mktemp("vllm-cli")
    key, cert = self_signed(tmp_path)
    trust = ssl.create_default_context(cafile=str(cert))
    args = [
        MODEL,
        "--served-model-name",
        "llama",
        "llama-8b",
        "--max-model-len",
        "8192",
        "--max-num-seqs",
        "64",
        "--enable-prefix-caching",
        "--api-key",
        "sk-test",
        "--enforce-eager",
        "--swap-space",
        "4",
        "--ssl-keyfile",
        str(key),
        "--ssl-certfile",
        str(cert),
    ]
    env = {"POD_NAME": "vllm-0", "POD_NAMESPACE": "serving"}
    with running_server(tmp_path, extra_args=args, env=env, trust=trust) as server:
        yield trust, server


def test_the_openai_sdk_is_served_over_tls(trust_and_server: tuple[ssl.SSLContext, ServerProcess]) -> None:
    trust, server = trust_and_server
    with openai.DefaultHttpxClient(verify=trust) as http:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-test", max_retries=0, http_client=http)
        listed = client.models.list().data
        assert [m.id for m in listed] == ["llama", "llama-8b"]
        assert (listed[0].model_extra or {})["max_model_len"] == 8192
        reply = client.chat.completions.create(
            model="llama", messages=[{"role": "user", "content": "hi"}], max_tokens=5, extra_body={"ignore_eos": True}
        )
        assert reply.model == "llama"
        assert reply.usage is not None
        assert reply.usage.completion_tokens == 5
        # Any served name; the answer gives the first, as vLLM's.
        aliased = client.completions.create(model="llama-8b", prompt="hi", max_tokens=2)
        assert aliased.model == "llama"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(
                base_url=server.base_url + "/v1", api_key="wrong", max_retries=0, http_client=http
            ).models.list()


def test_a_client_without_the_certificate_is_refused(trust_and_server: tuple[ssl.SSLContext, ServerProcess]) -> None:
    _, server = trust_and_server
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.base_url + "/health")


def test_llm_d_inference_sim_headers_and_readiness(trust_and_server: tuple[ssl.SSLContext, ServerProcess]) -> None:
    trust, server = trust_and_server
    ready = httpx.get(server.base_url + "/health/ready", verify=trust)
    assert ready.status_code == 200
    assert ready.headers["x-inference-pod"] == "vllm-0"
    assert ready.headers["x-inference-namespace"] == "serving"
    assert ready.headers["x-inference-port"] == str(server.port)


def test_one_warning_names_the_flags_without_effect(trust_and_server: tuple[ssl.SSLContext, ServerProcess]) -> None:
    _, server = trust_and_server
    warnings = [line for line in server.log().splitlines() if "without effect on the simulation" in line]
    assert len(warnings) == 1
    assert warnings[0].endswith(": --enforce-eager, --swap-space")
