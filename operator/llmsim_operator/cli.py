"""``llmsim-operator``: run the operator, or print its CRD / install manifests.

llmsim-operator run [--namespace NS ... | --all-namespaces] [--liveness URL] [--peering NAME | --standalone]
llmsim-operator manifests [--namespace NS] [--image IMAGE] [--simulator-image IMAGE]
llmsim-operator crd
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from llmsim_operator import __version__
from llmsim_operator import conventions as c
from llmsim_operator.crd import custom_resource_definition
from llmsim_operator.documents import dump_all
from llmsim_operator.manifests import DEFAULT_NAMESPACE, install_manifests
from llmsim_operator.settings import OperatorOptions


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmsim-operator", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument(
        "-n", "--namespace", action="append", default=[], help="serve this namespace (repeatable; kopf globs allowed)"
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace (the default)")
    run.add_argument("--liveness", metavar="URL", help="kopf liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    peering = run.add_mutually_exclusive_group()
    peering.add_argument("--peering", metavar="NAME", help="use kopf peering NAME (needs kopf's peering CRDs)")
    peering.add_argument("--standalone", action="store_true", help="no peering (the default)")
    run.add_argument(
        "--simulator-image",
        default=os.environ.get("LLMSIM_OPERATOR_SIMULATOR_IMAGE", c.DEFAULT_SIMULATOR_IMAGE),
        help="image for LLMSimulators without spec.image (env LLMSIM_OPERATOR_SIMULATOR_IMAGE)",
    )
    run.add_argument("--drift-interval", type=float, default=60.0, help="seconds between drift checks (60)")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")

    manifests = sub.add_parser("manifests", help="print CRD, RBAC and operator Deployment for kubectl apply")
    manifests.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"operator namespace ({DEFAULT_NAMESPACE})")
    manifests.add_argument("--image", default=c.DEFAULT_OPERATOR_IMAGE, help="operator image")
    manifests.add_argument("--simulator-image", default=c.DEFAULT_SIMULATOR_IMAGE, help="default simulator image")

    sub.add_parser("crd", help="print the LLMSimulator CustomResourceDefinition")
    return parser


def options_from_args(args: argparse.Namespace) -> OperatorOptions:
    return OperatorOptions(
        namespaces=tuple(args.namespace),
        all_namespaces=not args.namespace,
        peering=args.peering,
        liveness=args.liveness,
        simulator_image=args.simulator_image,
        drift_interval=args.drift_interval,
        kubeconfig=args.kubeconfig,
    )


def run(options: OperatorOptions, verbose: bool = False) -> None:
    """Run the operator until SIGINT/SIGTERM."""
    import kopf

    from llmsim_operator.handlers import register
    from llmsim_operator.settings import configure

    kopf.configure(log_format=kopf.LogFormat.PLAIN, verbose=verbose, log_prefix=True)
    registry = kopf.OperatorRegistry()
    register(registry, options)
    settings = kopf.OperatorSettings()
    configure(settings, options, instance=os.environ.get("POD_NAME", ""))
    kopf.run(
        registry=registry,
        settings=settings,
        clusterwide=options.all_namespaces,
        namespaces=options.namespaces,
        standalone=options.peering is None,
        peering_name=options.peering,
        liveness_endpoint=options.liveness,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "crd":
        sys.stdout.write(dump_all([custom_resource_definition()]))
    elif args.command == "manifests":
        sys.stdout.write(dump_all(install_manifests(args.namespace, args.image, args.simulator_image)))
    else:
        run(options_from_args(args), verbose=args.verbose)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
