"""Signed store documents: who published a manifest, checked offline against the keys a reader trusts (the
Nix binary-cache model).

ed25519 keys (``JITGUARD_SIGNING_KEY``, a private PEM only its owner reads; public keys as one line,
``jitguard-ed25519:<key id>:<hex>``). The signature travels inside the document (``jitguard.signed/1``) and
covers its name in the store, so it cannot be replayed elsewhere. Readers with ``JITGUARD_TRUSTED_KEYS``
refuse what is not signed by one of them (``SignatureRefused``); readers without accept all (docs/fleet.md).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jitguard import fileio
from jitguard.config import Settings
from jitguard.errors import UsageError
from jitguard.fleet.store_transport import ArtifactRejected

SCHEMA = "jitguard.signed/1"
KEY_TYPE = "jitguard-ed25519"
KEY_FILE_MAX_BYTES = 64 * 1024  # a PEM key is ~120 bytes; a list of trusted keys a few KiB
_DOMAIN = b"jitguard.signed/1\0"
_PUBLIC_LINE = re.compile(r"^jitguard-ed25519:([0-9a-f]{16}):([0-9a-f]{64})$")
_ENVELOPE = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"jitguard\.signed/1"')
_SIGNATURE_B64 = 88  # an ed25519 signature is 64 bytes
GENERATE_HINT = "jitguard warm keygen --out ~/.config/jitguard/signing.key"

# Seal statuses: accepted ones, then the reasons a document is refused.
TRUSTED = "trusted"  # signed by a trusted key, verified
UNVERIFIED = "unverified"  # signed; this host trusts no key, so nothing to check it against
UNSIGNED = "unsigned"
UNTRUSTED = "untrusted"  # signed by a key this host does not trust
BAD_SIGNATURE = "bad-signature"  # changed since it was signed, copied from another name, or malformed
STATUSES = (TRUSTED, UNVERIFIED, UNSIGNED, UNTRUSTED, BAD_SIGNATURE)


class SigningError(UsageError):
    """A signing key or a list of trusted keys that cannot be used; the message says why and the fix."""


@dataclass(frozen=True)
class Seal:
    """What a reader made of a document's signature: ``status`` (one of ``STATUSES``), the signer's key id
    (None: unsigned) and whether the document is used."""

    status: str
    signer: str | None = None
    accepted: bool = True

    def describe(self) -> str:
        if self.status == TRUSTED:
            return f"signed by key {self.signer} (trusted)"
        if self.status == UNVERIFIED:
            return f"signed by key {self.signer} (not checked: JITGUARD_TRUSTED_KEYS is not set here)"
        if self.status == UNSIGNED:
            return "unsigned" + (
                "" if not self.accepted else " (accepted: JITGUARD_TRUSTED_KEYS is not set here)"
            )
        if self.status == UNTRUSTED:
            return f"signed by key {self.signer}, which is not in JITGUARD_TRUSTED_KEYS"
        if self.signer is None:
            return "a signed document that is damaged (its key or body cannot be read)"
        return (
            f"signed by key {self.signer}, but the signature does not verify (changed since it was signed, "
            "or copied from another name)"
        )

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "signer": self.signer, "accepted": self.accepted}


class SignatureRefused(ArtifactRejected):
    """A document this host does not trust: unsigned, signed by another key, or a signature that does not
    verify. ``seal`` says which."""

    def __init__(self, name: str, seal: Seal, trusted: tuple[str, ...] = ()) -> None:
        self.seal = seal
        message = f"{name} is {seal.describe()}"
        if seal.status in (UNSIGNED, UNTRUSTED) and trusted:
            message += (
                f" (this host trusts {', '.join(trusted)}): publish it again from a host whose "
                "JITGUARD_SIGNING_KEY is one of those, or add its signer's public key to JITGUARD_TRUSTED_KEYS"
            )
        super().__init__(message)


@dataclass(frozen=True)
class PublicKey:
    key_id: str
    raw: bytes  # the 32 bytes of the ed25519 public key

    @classmethod
    def from_raw(cls, raw: bytes) -> PublicKey:
        return cls(hashlib.sha256(raw).hexdigest()[:16], raw)

    @classmethod
    def parse(cls, text: str, *, source: str = "JITGUARD_TRUSTED_KEYS") -> PublicKey:
        found = _PUBLIC_LINE.match(text.strip())
        if not found:
            raise SigningError(
                f"{source}: {text.strip()[:80]!r} is not a jitguard public key (expected "
                f"{KEY_TYPE}:<16 hex digits>:<64 hex digits>, the line `jitguard warm keygen` printed)"
            )
        key = cls.from_raw(bytes.fromhex(found.group(2)))
        if key.key_id != found.group(1):
            raise SigningError(
                f"{source}: the key {found.group(1)} is damaged (its id does not match the key: "
                f"{key.key_id}); copy the whole line `jitguard warm keygen` printed again"
            )
        return key

    @property
    def line(self) -> str:
        return f"{KEY_TYPE}:{self.key_id}:{self.raw.hex()}"


@dataclass(frozen=True)
class Signer:
    """A private key loaded from its file (``load_signer``)."""

    path: Path
    public: PublicKey
    _key: Any  # cryptography's Ed25519PrivateKey

    def sign(self, message: bytes) -> bytes:
        return bytes(self._key.sign(message))


@dataclass(frozen=True)
class Trust:
    """How this process signs what it publishes (``signing_key``: the private key's path, loaded when first
    needed) and which signers it accepts (``trusted``: empty means every document, signed or not)."""

    signing_key: Path | None = None
    trusted: tuple[PublicKey, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> Trust:
        """Raises SigningError for a JITGUARD_TRUSTED_KEYS that cannot be used (never read as "none")."""
        trusted = parse_trusted_keys(settings.trusted_keys) if settings.trusted_keys is not None else ()
        return cls(settings.signing_key, trusted)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Trust:
        return cls.from_settings(Settings.from_env(env))

    @property
    def trusted_ids(self) -> tuple[str, ...]:
        return tuple(k.key_id for k in self.trusted)

    def signer(self) -> Signer | None:
        """The signing key, None when none is set. Raises SigningError for one that cannot be used. Read once
        per Trust: a save checks the key before its first upload and signs with it after the last one."""
        if self.signing_key is None:
            return None
        loaded = self.__dict__.get("_signer")
        if loaded is None:
            loaded = load_signer(self.signing_key)
            object.__setattr__(self, "_signer", loaded)  # frozen: a cache, not state that compares
        return loaded

    def seal(self, name: str, body: bytes) -> bytes:
        """The document to write at ``name``: ``body`` signed when a signing key is set, else ``body``."""
        signer = self.signer()
        if signer is None:
            return body
        text = body.decode("utf-8")  # a manifest is JSON: always UTF-8; anything else is a bug of ours
        signature = signer.sign(_message(name, body))
        envelope = {
            "schema": SCHEMA,
            "key": signer.public.key_id,
            "signature": base64.b64encode(signature).decode(),
            "body": text,
        }
        return json.dumps(envelope, separators=(",", ":")).encode()

    def open(self, name: str, raw: bytes) -> tuple[bytes, Seal]:
        """The body of the document read at ``name`` and its seal. Raises SignatureRefused when this host
        trusts keys and the document is not signed by one of them; ArtifactRejected for a signed document
        that is malformed. ``raw`` is already bounded by the reader's size limit."""
        if not _ENVELOPE.match(raw[:256]):
            seal = Seal(UNSIGNED, None, accepted=not self.trusted)
            if not seal.accepted:
                raise SignatureRefused(name, seal, self.trusted_ids)
            return raw, seal
        try:
            key_id, signature, body = _parse_envelope(name, raw)
        except ArtifactRejected:
            if self.trusted:  # a damaged signature is a refusal like any other under trusted keys
                raise SignatureRefused(name, Seal(BAD_SIGNATURE, None, accepted=False)) from None
            raise
        if not self.trusted:
            return body, Seal(UNVERIFIED, key_id)
        key = next((k for k in self.trusted if k.key_id == key_id), None)
        if key is None:
            raise SignatureRefused(name, Seal(UNTRUSTED, key_id, accepted=False), self.trusted_ids)
        if signature is None or not _verify(key, signature, _message(name, body)):
            raise SignatureRefused(name, Seal(BAD_SIGNATURE, key_id, accepted=False))
        return body, Seal(TRUSTED, key_id)


def _ed25519() -> Any:
    """cryptography's ed25519 module; SigningError naming the install when the package is missing."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise SigningError(
            f"signatures need the cryptography package ({exc}); pip install 'cryptography>=42'"
        ) from None
    return ed25519


def _message(name: str, body: bytes) -> bytes:
    """What a signature covers: the domain, the document's name (length-prefixed) and its exact bytes."""
    encoded = name.encode("utf-8")
    return _DOMAIN + len(encoded).to_bytes(4, "big") + encoded + body


def _parse_envelope(name: str, raw: bytes) -> tuple[str, bytes | None, bytes]:
    """(key id, signature or None when it is not even well-formed, body bytes). A document whose key or body
    cannot be read is ArtifactRejected; a malformed signature is left to fail verification (so a reader
    that trusts no key still uses the body, and one that does says "does not verify")."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise ArtifactRejected(
            f"{name} is a signed document that is not JSON (truncated or damaged)"
        ) from None
    if not isinstance(data, dict):
        raise ArtifactRejected(f"{name} is not a signed document ({SCHEMA})")
    key_id, signature, body = data.get("key"), data.get("signature"), data.get("body")
    if not isinstance(key_id, str) or not re.fullmatch(r"[0-9a-f]{16}", key_id):
        raise ArtifactRejected(f"{name} is a signed document that names no signing key")
    if not isinstance(body, str):
        raise ArtifactRejected(f"{name} is a signed document with no body")
    try:
        body_bytes = body.encode("utf-8")
    except UnicodeEncodeError:
        raise ArtifactRejected(f"{name} is a signed document whose body is not UTF-8") from None
    decoded: bytes | None = None
    if isinstance(signature, str) and len(signature) == _SIGNATURE_B64:
        with contextlib.suppress(binascii.Error, ValueError):
            decoded = base64.b64decode(signature, validate=True)
    return key_id, decoded, body_bytes


def _verify(key: PublicKey, signature: bytes, message: bytes) -> bool:
    ed25519 = _ed25519()
    from cryptography.exceptions import InvalidSignature

    try:
        ed25519.Ed25519PublicKey.from_public_bytes(key.raw).verify(signature, message)
    except InvalidSignature:
        return False
    return True


# -- keys on disk -----------------------------------------------------------------------------------------


def generate(path: Path) -> PublicKey:
    """A new key pair: the private key written to ``path`` (mode 0600, created, never replacing anything);
    its public key returned. Raises SigningError when ``path`` exists or cannot be written."""
    ed25519 = _ed25519()
    from cryptography.hazmat.primitives import serialization

    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path = path.expanduser()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = fileio.open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SigningError(
            f"{path} exists already; a key is never overwritten (signatures made with it would no longer "
            "match any key a reader trusts). Give another --out, or remove it yourself first."
        ) from None
    except OSError as exc:
        raise SigningError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, pem)
    except OSError as exc:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        raise SigningError(f"cannot write {path}: {exc.strerror or exc}") from None
    os.close(fd)
    return _public_of(key)


def load_signer(path: Path) -> Signer:
    """The private key at ``path``, which must be a regular file of this user that no one else can read or
    write (as ssh requires of an identity file). Raises SigningError naming the fix."""
    ed25519 = _ed25519()
    from cryptography.hazmat.primitives import serialization

    data, st = _read_small(path, "JITGUARD_SIGNING_KEY")
    shown = f"The signing key {path} (JITGUARD_SIGNING_KEY)"
    foreign = fileio.PRIVATE_KEY.owner_reason(st)
    if foreign:
        raise SigningError(
            f"{shown} is {foreign}, not this user's (uid {os.geteuid()}): a signing key must be your own. Make "
            f"your own: {GENERATE_HINT} (or have root give it to you: chown <you> {path})"
        )
    reasons = fileio.PRIVATE_KEY.reasons(st)
    if reasons:
        raise SigningError(
            f"{shown} is {'; '.join(reasons)}: others can read or change it, so it is not used (as ssh refuses "
            f"such a key). Fix: chmod 600 {path}"
        )
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningError(
            f"{shown} is not an unencrypted PEM private key ({exc}); make one: {GENERATE_HINT}"
        ) from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise SigningError(
            f"{shown} is a {type(key).__name__}, not an ed25519 key; make one: {GENERATE_HINT}"
        )
    return Signer(path, _public_of(key), key)


def parse_trusted_keys(text: str) -> tuple[PublicKey, ...]:
    """The keys of JITGUARD_TRUSTED_KEYS: public key lines separated by commas or white space, or the
    absolute path of a file of them (one per line, each optionally followed by a comment; ``#`` starts a
    comment line). Raises SigningError for anything else, and for a list with no key in it (an empty trust
    list would read as "trust everything")."""
    tokens = [t for t in re.split(r"[\s,]+", text.strip()) if t]
    if len(tokens) == 1 and not tokens[0].startswith(KEY_TYPE + ":"):
        return _keys_from_file(Path(tokens[0]).expanduser())
    keys = tuple(PublicKey.parse(t) for t in tokens)
    if not keys:
        raise SigningError(
            "JITGUARD_TRUSTED_KEYS is set but holds no key; give the public key lines `jitguard warm "
            "keygen` printed (comma-separated), or unset it"
        )
    return tuple(dict.fromkeys(keys))


def _keys_from_file(path: Path) -> tuple[PublicKey, ...]:
    source = f"The trusted keys file {path} (JITGUARD_TRUSTED_KEYS)"
    if not path.is_absolute():
        raise SigningError(
            f"{source}: neither a public key line ({KEY_TYPE}:...) nor an absolute path of a file of them"
        )
    data, st = _read_small(path, "JITGUARD_TRUSTED_KEYS")
    reasons = fileio.PUBLISHED.reasons(st)
    if reasons:
        raise SigningError(
            f"{source} can be changed by another user ({'; '.join(reasons)}): anyone who can write it could add "
            f"their own key. Fix: chown $(id -u) {path} && chmod go-w {path}"
        )
    keys: list[PublicKey] = []
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        words = line.split()
        if words and not words[0].startswith("#"):
            keys.append(PublicKey.parse(words[0], source=f"{path} line {number}"))
    if not keys:
        raise SigningError(f"{source} holds no key; add the lines `jitguard warm keygen` printed")
    return tuple(dict.fromkeys(keys))


def _read_small(path: Path, variable: str) -> tuple[bytes, os.stat_result]:
    """The bytes of a small regular file and its stat, read from one descriptor (a link is followed, as ssh
    does: secrets mounted by Kubernetes are links; a FIFO never blocks)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SigningError(f"{path} ({variable}): no such file. Make a key: {GENERATE_HINT}") from None
    except OSError as exc:
        raise SigningError(f"{path} ({variable}) cannot be read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SigningError(f"{path} ({variable}) is not a regular file")
        if st.st_size > KEY_FILE_MAX_BYTES:
            raise SigningError(f"{path} ({variable}) is {st.st_size} bytes: not a key file")
        data = os.read(fd, KEY_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise SigningError(f"{path} ({variable}) cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return data, st


def _public_of(key: Any) -> PublicKey:
    from cryptography.hazmat.primitives import serialization

    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return PublicKey.from_raw(bytes(raw))
