"""The package's own exceptions, importable without torch: the command line catches them before it
has loaded torch (most of its commands never do)."""

from __future__ import annotations


class UnsupportedTorchError(RuntimeError):
    """This torch lacks a private API the emulator needs."""


class EmulatorUnavailableError(RuntimeError):
    """PrivateUse1 is already taken by another backend, so the emulator cannot register."""


class IntegrationError(RuntimeError):
    """A training stack (Lightning, Hugging Face, accelerate) asked for what the emulated device cannot give it,
    or is outside the versions tested: one line saying which and why."""
