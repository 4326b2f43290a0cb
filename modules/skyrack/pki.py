"""Keys and certificates for the control plane, in plain Python (no Pulumi).

The Azure stack (through a Pulumi dynamic provider that keeps the results in state) and
the local lab (directly) issue the same certificates with these functions, so the two
cannot drift. Keys are ECDSA P-256 (fast to make, accepted by etcd, Kubernetes and
kubeadm). Everything is PEM text so it can live in Pulumi secrets, Key Vault or files.

* `create_ca` / `issue`: a CA and leaf certificates signed by it (server, client or
  both usages; SANs as DNS names, IP addresses and other names: a Receptor node ID);
* `keypair`: a bare key pair (the service-account signing key);
* `ca_cert_hash`: kubeadm's discovery hash, ``sha256:<hex of the CA's DER
  SubjectPublicKeyInfo>``;
* `bootstrap_token`: a kubeadm bootstrap token, ``[a-z0-9]{6}.[a-z0-9]{16}``;
* `random_secret`: a random string for shared keys (the VPN's).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import re
import secrets
import string
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 10 * 365
LEAF_DAYS = 3 * 365
_CLOCK_SKEW = dt.timedelta(minutes=5)  # backdate so a member with a slightly slow clock accepts a new cert
_TOKEN_ALPHABET = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, both PEM."""

    cert_pem: str
    key_pem: str


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_to_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _load_key(pem: str) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("expected an ECDSA private key")
    return key


def load_cert(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _window(days: int, now: dt.datetime | None) -> tuple[dt.datetime, dt.datetime]:
    start = (now or dt.datetime.now(dt.UTC)) - _CLOCK_SKEW
    return start, start + dt.timedelta(days=days)


def create_ca(common_name: str, *, days: int = CA_DAYS, now: dt.datetime | None = None) -> Issued:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    key = new_key()
    start, end = _window(days, now)
    name = _name(common_name)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM).decode(), key_to_pem(key))


def issue(
    ca: Issued,
    common_name: str,
    *,
    organization: str | None = None,
    dns_names: Iterable[str] = (),
    ips: Iterable[str] = (),
    other_names: Iterable[tuple[str, str]] = (),
    server: bool = False,
    client: bool = False,
    days: int = LEAF_DAYS,
    now: dt.datetime | None = None,
) -> Issued:
    """A leaf certificate signed by `ca`: server and/or client usage, SANs as given (`other_names`:
    (OID, text) pairs, the text a UTF8String, as Receptor reads its node IDs)."""
    if not (server or client):
        raise ValueError("a certificate needs server or client usage (or both)")
    ca_cert = load_cert(ca.cert_pem)
    ca_key = _load_key(ca.key_pem)
    key = new_key()
    start, end = _window(days, now)
    end = min(end, ca_cert.not_valid_after_utc)  # never outlive the CA
    usages = [oid for oid, wanted in ((ExtendedKeyUsageOID.SERVER_AUTH, server),
                                      (ExtendedKeyUsageOID.CLIENT_AUTH, client)) if wanted]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization)).issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                     crl_sign=False, content_commitment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dict.fromkeys(dns_names)]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in dict.fromkeys(ips)]
    sans += [x509.OtherName(x509.ObjectIdentifier(oid), _utf8_string(text)) for oid, text in other_names]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM).decode(), key_to_pem(key))


def _utf8_string(text: str) -> bytes:
    """DER of an ASN.1 UTF8String (tag 12)."""
    data = text.encode()
    if len(data) >= 128:
        raise ValueError("other names are short labels (under 128 bytes)")
    return bytes([12, len(data)]) + data


def keypair(kind: str = "ec") -> Issued:
    """A key pair without a certificate: `cert_pem` holds the PEM public key. `kind="rsa"`: RSA 3072,
    for what reads only RSA (Receptor's work signing, RS256)."""
    if kind == "rsa":
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
        pub = rsa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        pem = rsa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return Issued(pub.decode(), pem.decode())
    key = new_key()
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return Issued(pub.decode(), key_to_pem(key))


def ca_cert_hash(ca_cert_pem: str) -> str:
    """kubeadm's `--discovery-token-ca-cert-hash`: SHA-256 of the CA's DER SubjectPublicKeyInfo."""
    spki = load_cert(ca_cert_pem).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def bootstrap_token() -> str:
    """A kubeadm bootstrap token: `<6 id>.<16 secret>` of [a-z0-9]."""
    pick = lambda n: "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(n))  # noqa: E731
    return f"{pick(6)}.{pick(16)}"


def random_secret(length: int = 40) -> str:
    """A random alphanumeric secret (pre-shared keys accept letters and digits everywhere)."""
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


def sans(cert_pem: str) -> tuple[list[str], list[str]]:
    """(DNS names, IP addresses) of a certificate, for checks and tests."""
    try:
        ext = load_cert(cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return ext.get_values_for_type(x509.DNSName), [str(i) for i in ext.get_values_for_type(x509.IPAddress)]


def not_after(cert_pem: str) -> str:
    """Expiry as an ISO 8601 UTC timestamp."""
    return load_cert(cert_pem).not_valid_after_utc.isoformat()


def ssh_keypair() -> tuple[str, str]:
    """(OpenSSH private key, `ssh-ed25519 ...` public key) for a VM's admin account."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, public


MAX_CA_BUNDLE = 64 * 1024  # a site's CA bundle is a few certificates, not a trust store


def ca_bundle(pem: str, now: dt.datetime | None = None) -> str:
    """A site's CA bundle (`mirrors.ca`) checked and normalised: one or more PEM certificates, each a CA and
    valid now, and nothing else in the text. ValueError says what is wrong, in words for the file's author."""
    if len(pem) > MAX_CA_BUNDLE:
        raise ValueError(f"{len(pem)} bytes: a CA bundle is at most {MAX_CA_BUNDLE // 1024} KiB")
    blocks = re.findall(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", pem, flags=re.S)
    rest = re.sub(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", "", pem, flags=re.S)
    if not blocks or rest.strip():
        raise ValueError("not PEM certificates (expected only -----BEGIN CERTIFICATE----- blocks)")
    now = now or dt.datetime.now(dt.UTC)
    out = []
    for i, (kind, _) in enumerate(blocks, 1):
        if kind != "CERTIFICATE":
            raise ValueError(f"block {i} is a {kind.lower()}, not a certificate (a private key never goes here)")
    try:
        certs = x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        raise ValueError("not PEM certificates (a block does not decode as an X.509 certificate)") from None
    for i, cert in enumerate(certs, 1):
        name = cert.subject.rfc4514_string() or f"certificate {i}"
        try:
            ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            ca = False
        if not ca:
            raise ValueError(f"{name!r} is not a CA certificate (no basicConstraints CA:TRUE): "
                             "give the CA that signed the mirrors' certificates, not a mirror's own")
        if cert.not_valid_after_utc <= now:
            raise ValueError(f"{name!r} expired on {cert.not_valid_after_utc:%Y-%m-%d}")
        if cert.not_valid_before_utc > now + _CLOCK_SKEW:
            raise ValueError(f"{name!r} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
        out.append(cert.public_bytes(serialization.Encoding.PEM).decode())
    return "".join(out)


def fingerprint(cert_pem: str) -> str:
    """SHA-256 of the first certificate's DER, as `openssl x509 -fingerprint -sha256` prints it (hex, colons)."""
    return load_cert(cert_pem).fingerprint(hashes.SHA256()).hex(":").upper()
