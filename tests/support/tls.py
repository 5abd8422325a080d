"""A throwaway PKI for tests that serve or speak TLS on 127.0.0.1: a CA, a server certificate for
the loopback address, a client certificate, and a second CA that signed none of them."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path             # the CA certificate that signed the server and client certificates
    other_ca: Path       # a CA that signed neither: verifying against it must fail
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(folder: Path, host: str = "127.0.0.1") -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("epochwatch test CA")
    _, other_cert = _ca("some other CA")
    server_key, server_cert = _leaf(ca_key, ca_cert, "alertmanager", ExtendedKeyUsageOID.SERVER_AUTH,
                                    [x509.IPAddress(ipaddress.ip_address(host))])
    client_key, client_cert = _leaf(ca_key, ca_cert, "epochwatch", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    files = {"ca": ca_cert, "other_ca": other_cert, "server_cert": server_cert, "server_key": server_key,
             "client_cert": client_cert, "client_key": client_key}
    paths = {}
    for name, item in files.items():
        paths[name] = folder / f"{name}.pem"
        paths[name].write_bytes(_pem(item))
    return Pki(**paths)


def _ca(name: str):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (_builder(subject, subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(ca_key, ca_cert, name: str, usage, names: list):
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (_builder(subject, ca_cert.subject, key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _builder(subject, issuer, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1)))


def _pem(item) -> bytes:
    if isinstance(item, x509.Certificate):
        return item.public_bytes(serialization.Encoding.PEM)
    return item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
