"""Test certificates made with the openssl command line: a CA, a broker certificate for 127.0.0.1 and
localhost, client certificates (one signed by another CA, one expired), all PEM, as Kafka's PEM key stores."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass
class Pki:
    dir: Path

    def path(self, name: str) -> str:
        return str(self.dir / name)

    def keystore(self, who: str) -> str:
        """key + certificate in one PEM file (Kafka's ssl.keystore.location for PEM)."""
        return self.path(f"{who}.keystore.pem")

    def cert(self, who: str) -> str:
        return self.path(f"{who}.crt")

    def key(self, who: str) -> str:
        return self.path(f"{who}.key")

    @property
    def ca(self) -> str:
        return self.path("ca.crt")


def _ca(d: Path, name: str, subject: str) -> None:
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt",
         "-days", "3650", "-subj", subject, cwd=d)


def _signed(d: Path, who: str, subject: str, ca: str, days: str = "3650", san: str | None = None,
            key_password: str | None = None, expired: bool = False) -> None:
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out", f"{who}.csr", "-subj", subject, cwd=d)
    ext = d / f"{who}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    if expired:
        # A certificate whose validity ended yesterday: `openssl ca`-free, with x509 -not_before/-not_after
        # where available, else a backdated one via -days with a fixed past start is impossible; use ca -startdate.
        cfg = d / f"{who}.cnf"
        cfg.write_text("[ca]\ndefault_ca=c\n[c]\ndatabase=index.txt\nnew_certs_dir=.\nserial=serial\n"
                       "default_md=sha256\npolicy=p\n[p]\ncommonName=supplied\n")
        (d / "index.txt").write_text("")
        (d / "serial").write_text("1000\n")
        _run("ca", "-batch", "-config", cfg.name, "-cert", f"{ca}.crt", "-keyfile", f"{ca}.key", "-in", f"{who}.csr",
             "-out", f"{who}.crt", "-startdate", "20200101000000Z", "-enddate", "20200201000000Z", "-notext", cwd=d)
    else:
        _run("x509", "-req", "-in", f"{who}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{who}.crt", "-days", days, "-extfile", ext.name, cwd=d)
    key = (d / f"{who}.key").read_text()
    if key_password is not None:
        _run("pkey", "-in", f"{who}.key", "-out", f"{who}.enc.key", "-aes256", "-passout", f"pass:{key_password}", cwd=d)
        key = (d / f"{who}.enc.key").read_text()
    (d / f"{who}.keystore.pem").write_text(key + (d / f"{who}.crt").read_text())


def make_pki(d: Path) -> Pki:
    """CA `ca`; broker (CN=broker, SAN 127.0.0.1/localhost); clients alice (CN=alice,OU=eng,O=gregor) and bob;
    `mallory` signed by an untrusted CA; `expired` signed by the CA but no longer valid; `broker-enc`
    with its key encrypted by the password "keypass"; `broker-evil`, a broker certificate of the other CA."""
    d.mkdir(parents=True, exist_ok=True)
    _ca(d, "ca", "/CN=gregor-test-ca")
    _ca(d, "evil-ca", "/CN=evil-ca")
    san = "IP:127.0.0.1,DNS:localhost"
    _signed(d, "broker", "/CN=broker/O=gregor", "ca", san=san)
    _signed(d, "broker-enc", "/CN=broker/O=gregor", "ca", san=san, key_password="keypass")
    _signed(d, "broker-evil", "/CN=broker/O=evil", "evil-ca", san=san)
    _signed(d, "alice", "/O=gregor/OU=eng/CN=alice", "ca")
    _signed(d, "bob", "/O=gregor/OU=ops/CN=bob", "ca")
    _signed(d, "mallory", "/CN=mallory", "evil-ca")
    _signed(d, "expired", "/CN=expired", "ca", expired=True)
    return Pki(d)
