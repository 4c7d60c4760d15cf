"""Images in registries (OCI distribution spec): references, credentials, auth and a client."""
from .client import Descriptor, Manifest, Registries, RegistryClient, RetryPolicy
from .reference import RegistryRef, is_loopback, parse_registry_ref

__all__ = ["Descriptor", "Manifest", "Registries", "RegistryClient", "RegistryRef", "RetryPolicy",
           "is_loopback", "parse_registry_ref"]
