"""``recforge cache prune``: drop shard-cache entries no recent published version used."""

from __future__ import annotations

import argparse
import json


def _prune(args: argparse.Namespace) -> int:
    from recforge.incremental import cache
    from recforge.run import use_spec_storage
    from recforge.spec import load_spec

    spec = load_spec(args.spec)
    if args.publish:
        spec = spec.with_overrides({"publish.uri": args.publish})
    use_spec_storage(spec)  # its deletes and lists carry what the buckets ask for
    result = cache.prune(spec, args.keep_versions, dry_run=args.dry_run,
                         min_age_hours=args.min_age_hours)
    verb = "would delete" if args.dry_run else "deleted"
    print(f"cache of {spec.name}: {result['entries']} entries, kept {result['kept']} used by "
          f"{', '.join(result['versions']) or 'no version'}; {verb} {result['deleted']}")
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


def register(sub) -> None:
    p = sub.add_parser("cache", help="the content-addressed shard cache of incremental builds")
    csub = p.add_subparsers(dest="cache_command", required=True)
    q = csub.add_parser("prune", help="remove cache entries not used by the last N published "
                        "versions (published versions are copies: none breaks)")
    q.add_argument("spec", help="dataset spec YAML")
    q.add_argument("--keep-versions", type=int, default=3, metavar="N",
                   help="keep what the newest N published versions were built from (default 3)")
    q.add_argument("--min-age-hours", type=float, default=48.0, metavar="H",
                   help="keep entries written in the last H hours: a build in progress merges "
                   "from them (default 48)")
    q.add_argument("--publish", help="override publish.uri")
    q.add_argument("--dry-run", action="store_true", help="only count what would be deleted")
    q.add_argument("--json", action="store_true", help="also print the result as JSON")
    q.set_defaults(func=_prune)
