"""The judge tests' judge server, run as a process of its own (``judge_server.py``), and their dataset row."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import requests

HERE = Path(__file__).resolve().parent


class JudgeServer:
    """``judge_server.py`` on a free port of 127.0.0.1; ``token`` guards it, ``redirect_to`` is where its
    ``redirect-judge`` model sends clients, ``tls`` (certificate and key files) makes it serve HTTPS."""

    def __init__(self, token: str = "", redirect_to: str = "", tls: Optional[Tuple[Path, Path]] = None) -> None:
        command = [sys.executable, str(HERE / "judge_server.py"), "--port", "0"]
        command += (["--token", token] if token else []) + (["--redirect-to", redirect_to] if redirect_to else [])
        command += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])] if tls else []
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        port = self.process.stdout.readline().strip()  # the server prints its port once it listens
        assert port.isdigit(), f"the judge server did not start (printed {port!r})"
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        self.token = token

    def stats(self) -> Dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return requests.get(self.url + "/stats", headers=headers, timeout=10).json()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.process.stdout.close()


def gsm8k_row(truth: str = "72", **reward_spec: Any) -> Dict[str, Any]:
    return {"reward_spec": {"method": "judge", "ground_truth": truth, **reward_spec}}


def self_signed_certificate(folder: Path) -> Tuple[Path, Path]:
    """A certificate for 127.0.0.1, signed by its own key, and the key, as PEM files in ``folder``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "judge-cert.pem", folder / "judge-key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path
