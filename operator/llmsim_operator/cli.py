"""``llmsim-operator``: run the operator, or print its CRD / install manifests.

llmsim-operator run [--namespace NS ... | --all-namespaces] [--liveness URL] [--peering NAME | --standalone]
llmsim-operator manifests [--namespace NS] [--image IMAGE] [--simulator-image IMAGE] [--kube-version V|auto]
llmsim-operator crd [--kube-version V|auto]

``manifests`` and ``crd`` need only a plain ``pip install llmsim``: nothing on their path imports
kopf or a Kubernetes client (``run`` needs the ``[operator]`` extra and says so).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any, cast

from llmsim_operator import __version__
from llmsim_operator import conventions as c
from llmsim_operator.crd import custom_resource_definition
from llmsim_operator.documents import dump_all
from llmsim_operator.kube_version import VersionError, detect_cel, parse_version, supports_cel
from llmsim_operator.manifests import DEFAULT_NAMESPACE, install_manifests
from llmsim_operator.options import OperatorOptions

#: The modules ``run`` needs beyond a plain install, and the extra that brings them.
_OPERATOR_EXTRA = "pip install 'llmsim[operator]'"


def _add_kube_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kube-version",
        metavar="VERSION|auto",
        help="target Kubernetes version, e.g. 1.20; 'auto' asks the cluster kubectl points at. "
        "Before 1.25 the CRD is printed without its CEL rules (the operator checks them itself). "
        "Default: the full CRD.",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmsim-operator", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the operator (needs the [operator] extra)")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument(
        "-n", "--namespace", action="append", default=[], help="serve this namespace (repeatable; kopf globs allowed)"
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace (the default)")
    run.add_argument(
        "--liveness", metavar="URL", help="kopf health endpoint for the probes, e.g. http://0.0.0.0:8080/healthz"
    )
    peering = run.add_mutually_exclusive_group()
    peering.add_argument("--peering", metavar="NAME", help="use kopf peering NAME (needs kopf's peering CRDs)")
    peering.add_argument("--standalone", action="store_true", help="no peering (the default)")
    run.add_argument(
        "--simulator-image",
        default=os.environ.get("LLMSIM_OPERATOR_SIMULATOR_IMAGE", c.DEFAULT_SIMULATOR_IMAGE),
        help="image for LLMSimulators without spec.image (env LLMSIM_OPERATOR_SIMULATOR_IMAGE)",
    )
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")

    manifests = sub.add_parser("manifests", help="print CRD, RBAC and operator Deployment for kubectl apply")
    manifests.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"operator namespace ({DEFAULT_NAMESPACE})")
    manifests.add_argument("--image", default=c.DEFAULT_OPERATOR_IMAGE, help="operator image")
    manifests.add_argument("--simulator-image", default=c.DEFAULT_SIMULATOR_IMAGE, help="default simulator image")
    _add_kube_version(manifests)

    crd = sub.add_parser("crd", help="print the LLMSimulator CustomResourceDefinition")
    _add_kube_version(crd)
    return parser


def own_identity() -> str:
    """kopf's name for this operator instance: the pod's name (Downward API), else host/pid.

    Given explicitly so that kopf never asks ``getpass.getuser()``, which raises for a uid without a
    passwd entry (any ``runAsUser`` the image does not know, e.g. OpenShift's random uids).
    """
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}/{os.getpid()}"


def options_from_args(args: argparse.Namespace) -> OperatorOptions:
    return OperatorOptions(
        namespaces=tuple(args.namespace),
        all_namespaces=not args.namespace,
        peering=args.peering,
        liveness=args.liveness,
        simulator_image=args.simulator_image,
        kubeconfig=args.kubeconfig,
        identity=own_identity(),
    )


def run(options: OperatorOptions, verbose: bool = False) -> None:
    """Run the operator until SIGINT/SIGTERM."""
    try:
        import kopf

        from llmsim_operator.handlers import register
        from llmsim_operator.settings import configure
    except ImportError as exc:
        raise SystemExit(f"llmsim-operator: 'run' needs the operator extra ({_OPERATOR_EXTRA}): {exc}") from None

    kopf.configure(log_format=kopf.LogFormat.PLAIN, verbose=verbose, log_prefix=True)
    if not verbose:
        # kopf logs every handler call per object at INFO ("Handler ... succeeded"): thousands of
        # lines, and their formatting, per bulk apply. The operator logs what it changed itself.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    registry = kopf.OperatorRegistry()
    register(registry, options)
    settings = kopf.OperatorSettings()
    configure(settings, options)
    kopf.run(
        registry=registry,
        settings=settings,
        clusterwide=options.all_namespaces,
        namespaces=options.namespaces,
        standalone=options.peering is None,
        peering_name=options.peering,
        liveness_endpoint=options.liveness,
        identity=cast(Any, options.identity),  # kopf's Identity is a NewType of str
    )


def _cel_wanted(kube_version: str | None) -> bool:
    """Whether the CRD keeps its CEL rules for ``--kube-version`` (None: yes, the full CRD)."""
    if kube_version is None:
        return True
    if kube_version == "auto":
        cel, why = detect_cel()
    else:
        cel, why = supports_cel(parse_version(kube_version)), f"--kube-version {kube_version}"
    if not cel:
        # stderr: stdout is the YAML being piped into kubectl.
        print(f"llmsim-operator: {why}: CRD without CEL rules (before 1.25; the operator checks them)", file=sys.stderr)
    return cel


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "crd":
            sys.stdout.write(dump_all([custom_resource_definition(cel=_cel_wanted(args.kube_version))]))
        elif args.command == "manifests":
            cel = _cel_wanted(args.kube_version)
            sys.stdout.write(dump_all(install_manifests(args.namespace, args.image, args.simulator_image, cel=cel)))
        else:
            run(options_from_args(args), verbose=args.verbose)
    except VersionError as exc:
        print(f"llmsim-operator: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
