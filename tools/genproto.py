"""Generate the gRPC stubs package ``spanq_proto`` (client/spanq_proto) from protos/.

protoc names a generated module, and the imports between generated modules,
after the .proto file's path under its -I root. So the path is the Python
package: protos/spanq_proto/v1/queue.proto becomes ``spanq_proto.v1.queue_pb2``,
and protoc's output is committed as it writes it (gRPC's own packages are laid
out so: grpc_health/v1/health.proto holds package grpc.health.v1). This script
only adds each package's ``__init__.py`` and ``py.typed``, which protoc does not
write. With ``--check`` nothing is written: the exit status says whether the
committed stubs match the protos (``make test`` runs this).
"""

import argparse
import filecmp
import pathlib
import shutil
import sys
import tempfile

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
PACKAGE = "spanq_proto"
OUT = ROOT / "client"
"""protoc's --*_out root: the stubs land in OUT / PACKAGE."""
INIT = ('"""The gRPC stubs generated from protos/ by `make proto` (do not edit): the SDK and the\n'
        'server both import them."""\n')


def generate(into: pathlib.Path) -> None:
    """Writes the package ``PACKAGE`` under ``into``."""
    include = pathlib.Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto
    files = sorted(str(p.relative_to(PROTOS)) for p in (PROTOS / PACKAGE).rglob("*.proto"))
    args = [
        "protoc",
        f"-I{PROTOS}",
        f"-I{include}",
        f"--python_out={into}",
        f"--pyi_out={into}",
        f"--grpc_python_out={into}",
        *files,
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")
    package = into / PACKAGE
    for folder in [package, *(p for p in package.rglob("*") if p.is_dir())]:
        (folder / "__init__.py").write_text(INIT)
    (package / "py.typed").write_text("")  # the SDK is typed (py.typed), and so are the stubs it returns


def differences(a: pathlib.Path, b: pathlib.Path) -> list[str]:
    cmp = filecmp.dircmp(a, b, ignore=["__pycache__"])
    out = [f"{cmp.left}: {n}" for n in cmp.left_only + cmp.right_only + cmp.diff_files]
    for sub in cmp.common_dirs:
        out += differences(a / sub, b / sub)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed stubs are stale")
    options = parser.parse_args()
    committed = OUT / PACKAGE
    with tempfile.TemporaryDirectory() as tmp:
        generate(pathlib.Path(tmp))
        fresh = pathlib.Path(tmp) / PACKAGE
        if options.check:
            stale = differences(fresh, committed) if committed.exists() else [str(committed)]
            if stale:
                sys.exit("generated stubs are stale; run `make proto`:\n  " + "\n  ".join(stale))
            print("generated stubs match protos/")
            return
        shutil.rmtree(committed, ignore_errors=True)
        shutil.copytree(fresh, committed)
        print(f"wrote {committed.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
