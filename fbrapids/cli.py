"""The ``fbrapids`` command line: ``fbrapids gen``, ``fbrapids demo`` and ``fbrapids serve``.

Example:
    >>> main(["gen", "--help"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence


def _gen(args: argparse.Namespace) -> int:
    from fbrapids.datagen import generate, read_metadata

    paths = generate(args.rows, args.out, seed=args.seed)
    meta = read_metadata(args.out)
    sys.stdout.write(
        f"wrote {', '.join(p.name for p in paths.values())} to {args.out} "
        f"({args.rows:,} impressions, CTR {meta['ctr']:.3f}, oracle AUC {meta['oracle_auc']:.4f})\n"
    )
    return 0


def _demo(args: argparse.Namespace) -> int:
    from fbrapids.demo import run_demo

    result = run_demo(rows=args.rows, data_dir=args.data_dir, backend=args.backend, model=args.model,
                      scheduler=args.scheduler, seed=args.seed, work_dir=args.work_dir,
                      batch_size=args.batch_size, checkpoint_every=args.checkpoint_every)
    sys.stdout.write(result.render() + "\n")
    if result.oracle_auc is not None:
        sys.stdout.write(f"  (the generator's hidden model reaches AUC {result.oracle_auc:.4f} on all days; "
                         "a model reaching >= 0.65 on the held-out day has learned the signal)\n")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from fbrapids.serving.http import serve

    serve(args.export_dir, args.host, args.port, cache_items=args.cache_items, max_items=args.max_items)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fbrapids", description="FeatureBox on RAPIDS")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("gen", help="write the seeded default ads log (four parquet files)")
    gen.add_argument("--rows", type=int, default=200_000, help="impressions to generate")
    gen.add_argument("--out", type=Path, required=True, help="output directory")
    gen.add_argument("--seed", type=int, default=0)
    gen.set_defaults(func=_gen)

    demo = sub.add_parser("demo", help="run the FeatureBox pipeline on the embedded default data")
    demo.add_argument("--rows", type=int, default=200_000, help="impressions in the default data")
    demo.add_argument("--data-dir", type=Path, default=None,
                      help="where the default data is generated and kept (default ~/.cache/fbrapids/data)")
    demo.add_argument("--backend", choices=("auto", "cpu", "gpu"), default=None)
    demo.add_argument("--model", default="dlrm", choices=("dlrm", "wide_deep", "deepfm"))
    demo.add_argument("--work-dir", type=Path, default=None, help="embedding store SSD files and checkpoints")
    demo.add_argument("--batch-size", type=int, default=2048)
    demo.add_argument("--checkpoint-every", type=int, default=None, help="also checkpoint every N steps")
    demo.add_argument("--scheduler", default=None, help="dask scheduler address (default: a local cluster)")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)

    srv = sub.add_parser("serve", help="serve an exported model over HTTP (needs the 'serve' extra)")
    srv.add_argument("export_dir", type=Path, help="a directory written by fbrapids.serving.export_model")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--cache-items", type=int, default=100_000, help="item-feature cache entries")
    srv.add_argument("--max-items", type=int, default=100_000, help="most candidate items in one request")
    srv.set_defaults(func=_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fbrapids`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return args.func(args)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
