"""Kafka's PasswordEncoder: dynamic password configs encrypted in the metadata store.

A dynamic broker config of Kafka's PASSWORD type (`listener.name.<l>.ssl.key.password`, a listener's
`sasl.jaas.config`, ...) is written to ZooKeeper's /config/brokers/<id> (or our embedded store) encrypted
with a key derived from `password.encoder.secret`, as Kafka's ZooKeeper-mode brokers do, so the store and
its backups never hold it in clear. Without a secret such a config is refused (INVALID_REQUEST,
"Password encoder secret not configured").

The stored text is Kafka's: comma-separated `name:value` fields `keyFactoryAlgorithm`, `cipherAlgorithm`,
`keyLength`, `salt` (256 random bytes, base64), `iterations`, `encryptedPassword` (base64),
`passwordLength` and the cipher's parameters (`initializationVector`, plus `authenticationTagLength` for
GCM). The key is PBKDF2 (HMAC-SHA512 by default) of the secret with the salt, `password.encoder.key.length`
bits, `password.encoder.iterations` rounds; the cipher AES/CBC/PKCS5Padding (Kafka's default) or
AES/GCM/NoPadding. Each field says how it was encoded, so a value stays readable after the encoder's
settings change; only the secret must be known. `password.encoder.old.secret` rotates it: at start the
broker decodes its stored passwords with the old secret and writes them back under the new one.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

from gregor.configdef import ConfigError

CBC = "AES/CBC/PKCS5Padding"
GCM = "AES/GCM/NoPadding"
CIPHERS = (CBC, GCM)
KEY_FACTORIES = {"PBKDF2WithHmacSHA512": hashes.SHA512, "PBKDF2WithHmacSHA256": hashes.SHA256,
                 "PBKDF2WithHmacSHA1": hashes.SHA1}
DEFAULT_KEY_FACTORY = "PBKDF2WithHmacSHA512"  # Kafka's choice when the JVM has it (every current JVM does)
SALT_BYTES = 256
GCM_TAG_BITS = 128


class PasswordDecodeError(ConfigError):
    """A stored password could not be decoded (another secret, or a damaged value)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class PasswordEncoder:
    """Encodes with its settings; decodes any value encoded with its secret (the value names its settings)."""

    secret: str
    cipher_algorithm: str = CBC
    key_length: int = 128
    iterations: int = 4096
    key_factory_algorithm: str = DEFAULT_KEY_FACTORY

    def __post_init__(self) -> None:
        if not self.secret:
            raise ConfigError("password.encoder.secret must not be empty")
        if self.cipher_algorithm not in CIPHERS:
            raise ConfigError(f"Invalid value {self.cipher_algorithm} for configuration password.encoder.cipher.algorithm: "
                              f"String must be one of: {', '.join(CIPHERS)}")
        if self.key_length not in (128, 192, 256):
            raise ConfigError(f"Invalid value {self.key_length} for configuration password.encoder.key.length: "
                              f"an AES key is 128, 192 or 256 bits")
        if self.key_factory_algorithm not in KEY_FACTORIES:
            raise ConfigError(f"Invalid value {self.key_factory_algorithm} for configuration "
                              f"password.encoder.keyfactory.algorithm: String must be one of: {', '.join(KEY_FACTORIES)}")

    def _key(self, salt: bytes, factory: str, key_length: int, iterations: int) -> bytes:
        if factory not in KEY_FACTORIES:
            raise PasswordDecodeError(f"unknown key factory algorithm {factory}")
        kdf = PBKDF2HMAC(algorithm=KEY_FACTORIES[factory](), length=key_length // 8, salt=salt, iterations=iterations)
        return kdf.derive(self.secret.encode("utf-8"))

    def encode(self, password: str) -> str:
        """The stored form of `password`: Kafka's `name:value,...` fields."""
        salt = os.urandom(SALT_BYTES)
        key = self._key(salt, self.key_factory_algorithm, self.key_length, self.iterations)
        plain = password.encode("utf-8")
        fields = {"keyFactoryAlgorithm": self.key_factory_algorithm, "cipherAlgorithm": self.cipher_algorithm,
                  "keyLength": str(self.key_length), "salt": _b64(salt), "iterations": str(self.iterations)}
        if self.cipher_algorithm == CBC:
            iv = os.urandom(16)
            padder = padding.PKCS7(128).padder()
            enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            data = enc.update(padder.update(plain) + padder.finalize()) + enc.finalize()
            params = {"initializationVector": _b64(iv)}
        else:
            iv = os.urandom(12)
            data = AESGCM(key).encrypt(iv, plain, None)
            params = {"authenticationTagLength": str(GCM_TAG_BITS), "initializationVector": _b64(iv)}
        fields |= {"encryptedPassword": _b64(data), "passwordLength": str(len(password)), **params}
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, stored: str) -> str:
        """The password in `stored`; PasswordDecodeError if this secret does not open it."""
        try:
            fields = dict(item.split(":", 1) for item in stored.split(","))
            salt = base64.b64decode(fields["salt"], validate=True)
            iv = base64.b64decode(fields["initializationVector"], validate=True)
            data = base64.b64decode(fields["encryptedPassword"], validate=True)
            key = self._key(salt, fields["keyFactoryAlgorithm"], int(fields["keyLength"]), int(fields["iterations"]))
            cipher, length = fields["cipherAlgorithm"], int(fields["passwordLength"])
        except (KeyError, ValueError) as e:
            raise PasswordDecodeError(f"not an encoded password ({e})") from None
        try:
            if cipher == CBC:
                dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                unpadder = padding.PKCS7(128).unpadder()
                plain = unpadder.update(dec.update(data) + dec.finalize()) + unpadder.finalize()
            elif cipher == GCM:
                plain = AESGCM(key).decrypt(iv, data, None)
            else:
                raise PasswordDecodeError(f"unknown cipher algorithm {cipher}")
            password = plain.decode("utf-8")
        except PasswordDecodeError:
            raise
        except Exception:  # a wrong key: bad padding, a failed tag, bytes that are no UTF-8
            raise PasswordDecodeError("Password could not be decoded (another password.encoder.secret?)") from None
        if len(password) != length:  # Kafka's sanity check: a wrong key may still unpad by chance
            raise PasswordDecodeError("Password could not be decoded, sanity check of length failed")
        return password


def encoders_from_config(get: Callable[[str], Any]) -> tuple[PasswordEncoder | None, PasswordEncoder | None]:
    """(the encoder of password.encoder.secret, the one of password.encoder.old.secret), None where unset.
    `get` reads a parsed broker property."""

    def make(secret: str | None) -> PasswordEncoder | None:
        if not secret:
            return None
        return PasswordEncoder(secret, get("password.encoder.cipher.algorithm"), get("password.encoder.key.length"),
                               get("password.encoder.iterations"),
                               get("password.encoder.keyfactory.algorithm") or DEFAULT_KEY_FACTORY)
    return make(get("password.encoder.secret")), make(get("password.encoder.old.secret"))
