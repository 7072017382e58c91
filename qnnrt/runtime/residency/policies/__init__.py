"""The built-in residency policies, one module each. Importing this package imports every module in
it, and each registers its policy (`@register`): a new built-in policy is a new module here."""
import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
