"""``epochwatch dashboards render|push``: Grafana dashboards as code."""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("dashboards", help="render or push the Grafana dashboards",
                                   description="Grafana dashboards as code: render them to JSON files or push them to Grafana.")
    sub = parser.add_subparsers(dest="dashboards_command", metavar="ACTION", required=True)

    render = sub.add_parser("render", help="write every dashboard as sorted JSON into a directory",
                            description="Write <uid>.json per dashboard (sorted keys, stable across runs), e.g. into "
                                        "the directory Grafana's file provisioning watches.")
    render.add_argument("--out", required=True, metavar="DIR", help="output directory (created if missing)")
    render.add_argument("--check", action="store_true",
                        help="validate against Grafana's dashboard JSON schema first (needs jsonschema)")
    render.set_defaults(func=run_render)

    push = sub.add_parser("push", help="push every dashboard to Grafana's HTTP API",
                          description="Create the folder if missing, then save each dashboard with overwrite. "
                                      "Credentials: GRAFANA_TOKEN (Bearer) or GRAFANA_USER + GRAFANA_PASSWORD.")
    push.add_argument("--url", required=True, help="Grafana base URL, e.g. http://127.0.0.1:3000")
    push.add_argument("--folder-uid", required=True, help="uid of the folder to put the dashboards in")
    push.add_argument("--folder-title", default=None, help="title used when the folder has to be created")
    push.add_argument("--message", default=None, help="version-history message of this save")
    push.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout in seconds (default 10)")
    push.set_defaults(func=run_push)


def run_render(args) -> int:
    from dashboards import build_all
    from dashboards.render import render

    dashboards = build_all()
    if args.check:
        from dashboards.validation import schema_errors

        problems = [f"{uid}: {e}" for uid, d in dashboards.items() for e in schema_errors(d)]
        if problems:
            print("epochwatch: dashboards do not match Grafana's schema:", *problems, sep="\n  ", file=sys.stderr)
            return 1
    for path in render(dashboards, args.out):
        print(path)
    return 0


def run_push(args) -> int:
    from dashboards import build_all
    from dashboards.push import DEFAULT_FOLDER_TITLE, DEFAULT_MESSAGE, PushError, check_folder_uid, check_url, \
        credentials_from_env, push_all

    url, folder_uid = check_url(args.url), check_folder_uid(args.folder_uid)
    credentials = credentials_from_env()
    try:
        pushed = push_all(build_all(), url=url, folder_uid=folder_uid,
                          folder_title=args.folder_title or DEFAULT_FOLDER_TITLE,
                          message=args.message or DEFAULT_MESSAGE, credentials=credentials, timeout_s=args.timeout)
    except PushError as exc:
        print(f"epochwatch: {exc}", file=sys.stderr)
        return 1
    for item in pushed:
        print(f"{item.uid}\tversion {item.version}\t{url}{item.url or ''}")
    return 0
