"""Tries to write outside its scratch directory: the gradebook, the kit, home, system dirs."""
import os


def write_everywhere(paths):
    result = {}
    for path in paths:
        try:
            with open(path, "a") as f:
                f.write("student was here\n")
            result[path] = "WROTE"
        except OSError as exc:
            result[path] = f"ERR:{type(exc).__name__}"
    return result


def write_scratch(name, text):
    with open(name, "w") as f:
        f.write(text)
    return os.path.abspath(name)


def read_scratch(paths):
    out = {}
    for path in paths:
        try:
            out[path] = open(path).read()
        except OSError as exc:
            out[path] = f"ERR:{type(exc).__name__}"
    return out
