"""The ABI layer: ctypes structs, function tables, error codes, library discovery. Nothing here
decides lifetimes or policy."""
