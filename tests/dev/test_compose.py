"""docker-compose.yaml is valid Compose and wired so the pipeline can actually run on it.

No Docker engine runs here, so the file is checked statically: against the Compose
Specification JSON schema, and for the wiring mistakes that only show up at run time (a queue
nobody listens to, a dependency on a service without a health check, an undeclared volume, a
password typed into the file). Each check is a function that returns the problems it found; the
``TestChecksCatch`` class proves every one of them fails on a deliberately broken copy.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"
ENV_EXAMPLE = REPO / ".env.example"
# The schema lives next to the repository (../shared); RECFORGE_COMPOSE_SCHEMA overrides.
SCHEMA_FILE = Path(
    os.environ.get("RECFORGE_COMPOSE_SCHEMA")
    or REPO.parent / "shared" / "schemas" / "compose-spec.json"
)
CODE_GLOBS = ("dags/**/*.py", "include/recforge/**/*.py")

# What the deployment must provide, whatever the code uses today.
REQUIRED_QUEUES = {"default", "gpu"}
REQUIRED_POOLS = {"recforge_pack", "recforge_gpu_bench"}
REQUIRED_SERVICES = {
    "postgres", "redis", "rgw", "mailpit", "airflow-apiserver",
    "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer", "airflow-init",
    "airflow-worker", "airflow-worker-gpu",
}
AIRFLOW_MOUNTS = {"/opt/airflow/dags", "/opt/airflow/include", "/opt/airflow/plugins"}

SECRET_NAME = re.compile(
    r"PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|ACCESS_KEY|PRIVATE_KEY|FERNET_KEY|CREDENTIAL", re.I
)
ONLY_INTERPOLATION = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::?[-?][^}]*)?\}$")
# user:password@ in any URL; the password part must be one ${...}.
URL_USERINFO = re.compile(r"[a-z][a-z0-9+.\-]*://([^/@\s]*)@", re.I)
ANY_INTERPOLATION = re.compile(r"\$\{[^}]*\}")
JSON_SECRET = re.compile(r'"(?:password|secret|token)[^"]*"\s*:\s*"([^"]*)"', re.I)
# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?msg}; `$${...}` is escaped for the container.
INTERPOLATION = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


# --- loading ---------------------------------------------------------------------------------

def load_compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


@pytest.fixture()
def compose() -> dict:
    """A fresh parsed copy per test (YAML merge keys resolved, as Compose does)."""
    return load_compose()


def as_dict(env) -> dict:
    """Compose allows environment as a mapping or a list of KEY=VALUE."""
    if isinstance(env, dict):
        return {k: ("" if v is None else str(v)) for k, v in env.items()}
    out = {}
    for item in env or []:
        key, _, value = str(item).partition("=")
        out[key] = value
    return out


def command_words(service: dict) -> list[str]:
    cmd = service.get("command") or []
    return cmd.split() if isinstance(cmd, str) else [str(c) for c in cmd]


def is_celery_worker(service: dict) -> bool:
    words = command_words(service)
    return "celery" in words and "worker" in words


def worker_queues(service: dict) -> set[str]:
    """Queues a ``celery worker`` command serves (Airflow's default queue if none given)."""
    words = command_words(service)
    for i, word in enumerate(words):
        if word in ("-q", "--queues") and i + 1 < len(words):
            return {q.strip() for q in words[i + 1].split(",") if q.strip()}
        if word.startswith("--queues="):
            return {q.strip() for q in word.split("=", 1)[1].split(",") if q.strip()}
    env = as_dict(service.get("environment"))
    return {env.get("AIRFLOW__OPERATORS__DEFAULT_QUEUE", "default")}


def is_airflow_service(service: dict) -> bool:
    return "AIRFLOW__CORE__EXECUTOR" in as_dict(service.get("environment"))


def is_long_running(service: dict) -> bool:
    """One-shot jobs say so with ``restart: "no"``; everything else must stay up."""
    return str(service.get("restart", "no")) != "no"


def mount_targets(service: dict) -> dict[str, str]:
    """target → source for every volume entry (short or long syntax)."""
    out = {}
    for vol in service.get("volumes") or []:
        if isinstance(vol, dict):
            out[vol.get("target", "")] = str(vol.get("source", ""))
        else:
            parts = str(vol).split(":")
            if len(parts) >= 2:
                # a source may contain ':' inside ${VAR:-default}; the target is never first
                target = next(p for p in reversed(parts) if p.startswith("/"))
                out[target] = str(vol)[: str(vol).index(":" + target)]
    return out


def named_volume_sources(service: dict) -> set[str]:
    names = set()
    for vol in service.get("volumes") or []:
        if isinstance(vol, dict):
            if vol.get("type", "volume") == "volume" and vol.get("source"):
                names.add(vol["source"])
            continue
        source = str(vol).split(":", 1)[0]
        if ":" in str(vol) and not source.startswith(("/", ".", "~", "$")):
            names.add(source)
    return names


# --- what the code asks of the cluster -------------------------------------------------------

def _module_constants(tree: ast.Module) -> dict[str, str]:
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    consts[target.id] = node.value.value
    return consts


def _declared_pool(value: ast.expr) -> str | None:
    """``pools.PACK.name``: a pool declared in ``recforge.orchestration.pools``."""
    if (isinstance(value, ast.Attribute) and value.attr == "name"
            and isinstance(value.value, ast.Attribute)
            and isinstance(value.value.value, ast.Name) and value.value.value.id == "pools"):
        from recforge.orchestration import pools

        declared = getattr(pools, value.value.attr, None)
        return declared.name if isinstance(declared, pools.Pool) else None
    return None


def scan_code_for(keyword: str, files: list[Path]) -> tuple[set[str], list[str]]:
    """String values given to ``keyword=`` (calls) or ``"keyword":`` (dict literals, e.g.
    default_args) in ``files``; returns (values, problems for values that are not literals)."""
    found, problems = set(), []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        consts = _module_constants(tree)
        values: list[tuple[int, ast.expr]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                values += [(kw.value.lineno, kw.value) for kw in node.keywords
                           if kw.arg == keyword]
            elif isinstance(node, ast.Dict):
                values += [(v.lineno, v) for k, v in zip(node.keys, node.values, strict=True)
                           if isinstance(k, ast.Constant) and k.value == keyword]
        for lineno, value in values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(value.value)
            elif isinstance(value, ast.Name) and value.id in consts:
                found.add(consts[value.id])
            elif (declared := _declared_pool(value)) is not None:
                found.add(declared)
            elif isinstance(value, ast.Constant) and value.value is None:
                continue
            else:
                rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                problems.append(
                    f"{rel}:{lineno}: {keyword}={ast.unparse(value)} is not a string literal or "
                    f"module-level constant, so this test cannot check the cluster provides it; "
                    f"use a literal such as {keyword}=\"gpu\""
                )
    return found, problems


def code_files() -> list[Path]:
    return sorted({p for pattern in CODE_GLOBS for p in REPO.glob(pattern)})


# --- checks: each returns a list of problems -------------------------------------------------

def schema_problems(compose: dict, schema: dict) -> list[str]:
    from jsonschema import Draft7Validator

    validator = Draft7Validator(schema)
    return [
        f"{'/'.join(str(p) for p in err.absolute_path) or '(top level)'}: {err.message}"
        for err in sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    ]


def service_problems(compose: dict) -> list[str]:
    services = compose.get("services", {})
    problems = [f"service {name!r} is missing (the deployment needs it)"
                for name in sorted(REQUIRED_SERVICES - services.keys())]
    if "x-airflow-common" not in compose:
        problems.append("no x-airflow-common anchor: Airflow services must share one definition")
    return problems


def queue_problems(compose: dict, queues: set[str]) -> list[str]:
    """Every queue a task uses is served by at least one Celery worker (any profile)."""
    served: dict[str, list[str]] = {}
    for name, svc in compose.get("services", {}).items():
        if is_celery_worker(svc):
            for q in worker_queues(svc):
                served.setdefault(q, []).append(name)
    return [f"queue {q!r} is used by tasks but no Celery worker serves it "
            f"(workers serve: {sorted(served) or 'nothing'}); add a worker with "
            f"`celery worker --queues {q}`" for q in sorted(queues - served.keys())]


def worker_problems(compose: dict) -> list[str]:
    """The two workers the deployment needs: exact queues, and the GPU one really gets a GPU."""
    services = compose.get("services", {})
    problems = []
    for name, want in (("airflow-worker", {"default"}), ("airflow-worker-gpu", {"gpu"})):
        svc = services.get(name)
        if svc is None:
            continue
        if not is_celery_worker(svc):
            problems.append(f"{name}: command {svc.get('command')!r} is not `celery worker`")
        elif worker_queues(svc) != want:
            problems.append(f"{name}: serves {sorted(worker_queues(svc))}, expected "
                            f"{sorted(want)} (set --queues)")
    for name, svc in services.items():
        if not (is_celery_worker(svc) and "gpu" in worker_queues(svc)):
            continue
        devices = (((svc.get("deploy") or {}).get("resources") or {}).get("reservations")
                   or {}).get("devices") or []
        if not any(d.get("driver") == "nvidia" and "gpu" in (d.get("capabilities") or [])
                   and str(d.get("count")) in ("1", "all") for d in devices):
            problems.append(f"{name}: serves queue 'gpu' but reserves no NVIDIA GPU "
                            "(deploy.resources.reservations.devices: driver nvidia, count 1, "
                            "capabilities [gpu])")
        build = svc.get("build") or {}
        dockerfile = build.get("dockerfile") if isinstance(build, dict) else None
        if dockerfile != "Dockerfile.gpu":
            problems.append(f"{name}: serves queue 'gpu' but is built from {dockerfile!r}, "
                            "not Dockerfile.gpu (the CPU image has no CUDA MXNet)")
    return problems


def healthcheck_problems(compose: dict) -> list[str]:
    services = compose.get("services", {})
    problems = []
    completed_targets = {
        target
        for svc in services.values()
        for target, dep in (svc.get("depends_on") or {}).items()
        if isinstance(svc.get("depends_on"), dict)
        and (dep or {}).get("condition") == "service_completed_successfully"
    }
    for name, svc in services.items():
        check = svc.get("healthcheck") or {}
        if is_long_running(svc):
            if not check.get("test") or check.get("disable"):
                problems.append(f"{name}: long-running service without a health check")
        elif name not in completed_targets and not svc.get("profiles"):
            problems.append(f"{name}: restart 'no' marks a one-shot job, but nothing waits for "
                            "it with condition service_completed_successfully")
    return problems


def depends_on_problems(compose: dict) -> list[str]:
    services = compose.get("services", {})
    problems = []
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        items = deps.items() if isinstance(deps, dict) else ((d, {}) for d in deps)
        for target, dep in items:
            if target not in services:
                problems.append(f"{name}: depends_on {target!r}, which is not a service")
                continue
            if target == name:
                problems.append(f"{name}: depends on itself")
            condition = (dep or {}).get("condition", "service_started")
            target_check = services[target].get("healthcheck") or {}
            if condition == "service_healthy" and not target_check.get("test"):
                problems.append(f"{name}: waits for {target!r} to be healthy, but it has no "
                                "health check (it would never start)")
            if condition == "service_completed_successfully" and is_long_running(services[target]):
                problems.append(f"{name}: waits for {target!r} to complete, but it restarts "
                                "forever (set restart: \"no\")")
    return problems


def volume_problems(compose: dict) -> list[str]:
    declared = set((compose.get("volumes") or {}).keys())
    used: set[str] = set()
    problems = []
    for name, svc in compose.get("services", {}).items():
        for vol in sorted(named_volume_sources(svc)):
            used.add(vol)
            if vol not in declared:
                problems.append(f"{name}: named volume {vol!r} is not declared under top-level "
                                "`volumes:`")
        if is_airflow_service(svc):
            missing = AIRFLOW_MOUNTS - mount_targets(svc).keys()
            if missing:
                problems.append(f"{name}: does not mount {sorted(missing)} (dags/, include/ and "
                                "plugins/ from the working tree)")
    problems += [f"volume {v!r} is declared but no service uses it"
                 for v in sorted(declared - used)]
    return problems


def airflow_settings_problems(compose: dict) -> list[str]:
    services = compose.get("services", {})
    problems = []
    airflow = {n: s for n, s in services.items() if is_airflow_service(s)}
    for name in sorted(n for n in REQUIRED_SERVICES if n.startswith("airflow-")):
        if name in services and name not in airflow:
            problems.append(f"{name}: not built on x-airflow-common (no AIRFLOW__CORE__EXECUTOR)")
    for name, svc in sorted(airflow.items()):
        env = as_dict(svc.get("environment"))
        want = {"AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CORE__LOAD_EXAMPLES": "false"}
        for key, value in want.items():
            if env.get(key, "").lower() != value.lower():
                problems.append(f"{name}: {key}={env.get(key)!r}, expected {value!r}")
        endpoint = env.get("AWS_ENDPOINT_URL", "")
        host = re.sub(r"^https?://", "", endpoint).split(":")[0].split("/")[0]
        if host not in services or "ceph" not in str(services.get(host, {}).get("image", "")):
            problems.append(f"{name}: AWS_ENDPOINT_URL={endpoint!r} does not point at the Ceph "
                            "RGW service")
        if _has_bad_image_source(svc):
            problems.append(f"{name}: installs packages at start (_PIP_ADDITIONAL_REQUIREMENTS); "
                            "build them into the image instead")
    return problems


def _has_bad_image_source(svc: dict) -> bool:
    return bool(as_dict(svc.get("environment")).get("_PIP_ADDITIONAL_REQUIREMENTS", "").strip())


def _walk_strings(node, path=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk_strings(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk_strings(v, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


def secret_problems(compose: dict) -> list[str]:
    """Credentials only through ${...} (from .env), never typed into the file."""
    problems = []
    for name, svc in compose.get("services", {}).items():
        for key, value in as_dict(svc.get("environment")).items():
            if SECRET_NAME.search(key) and not key.endswith(("_FILE", "_CMD")) and value \
                    and not ONLY_INTERPOLATION.match(value):
                problems.append(f"{name}: {key} is a literal; use ${{{key}}} from .env")
    for path, text in _walk_strings(compose):
        for userinfo in URL_USERINFO.findall(text):
            # mask ${...} first: a default like ${USER:-airflow} contains ':' itself
            masked = ANY_INTERPOLATION.sub("<var>", userinfo)
            password = masked.split(":", 1)[1] if ":" in masked else ""
            if password not in ("", "<var>"):
                problems.append(f"{path}: URL with a literal password; use ${{...}} from .env")
        for value in JSON_SECRET.findall(text):
            if value and not ONLY_INTERPOLATION.match(value):
                problems.append(f"{path}: JSON with a literal secret; use ${{...}} from .env")
    return problems


def parse_env_file(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def env_example_problems(compose: dict, env_text: str) -> list[str]:
    """Every variable the compose file reads is documented in .env.example with the same
    default, and the example says loudly that its values are for development only."""
    documented = parse_env_file(env_text)
    problems = []
    if "DEVELOPMENT ONLY" not in env_text.upper():
        problems.append(".env.example does not say its credentials are for development only")
    used = {m for _, text in _walk_strings(compose) for m in INTERPOLATION.findall(text)}
    for var, op, default in sorted(used):
        if var not in documented:
            problems.append(f"${{{var}}} is used in docker-compose.yaml but not in .env.example")
        elif op in ("-", ":-") and documented[var] != default:
            problems.append(f"{var}: docker-compose.yaml falls back to {default!r} but "
                            f".env.example sets {documented[var]!r}; keep them equal")
    return problems


def pool_problems(compose: dict, pools: set[str]) -> list[str]:
    """Every pool a task uses is created by airflow-init (a missing pool stalls its tasks)."""
    init = compose.get("services", {}).get("airflow-init", {})
    script = " ".join(command_words(init))
    created = set(re.findall(r"airflow pools set (\S+)", script))
    if "airflow pools import" in script and "recforge.orchestration.pools" in script:
        from recforge.orchestration import pools as declared  # the shipped pools.json

        created |= declared.NAMES
    return [f"pool {p!r} is used by tasks but airflow-init does not create it "
            f"(`airflow pools set {p} <slots> <description>`)" for p in sorted(pools - created)]


# --- the real file ---------------------------------------------------------------------------

def test_compose_file_validates_against_the_compose_spec(compose):
    if not SCHEMA_FILE.is_file():
        why = (f"Compose Specification schema not found at {SCHEMA_FILE} (expected "
               "../shared/schemas/compose-spec.json next to the repository; set "
               "RECFORGE_COMPOSE_SCHEMA to its path)")
        if os.environ.get("CI"):  # CI lays shared/ beside the clone: absence is a failure
            pytest.fail(why)
        pytest.skip(why)
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert schema_problems(compose, schema) == []


def test_required_services_exist(compose):
    assert service_problems(compose) == []


def test_code_queues_and_pools_are_literals():
    _, queue_issues = scan_code_for("queue", code_files())
    _, pool_issues = scan_code_for("pool", code_files())
    assert queue_issues + pool_issues == []


def test_every_queue_has_a_worker(compose):
    used, _ = scan_code_for("queue", code_files())
    assert queue_problems(compose, used | REQUIRED_QUEUES) == []


def test_workers_serve_their_queue_and_the_gpu_worker_gets_a_gpu(compose):
    assert worker_problems(compose) == []


def test_every_long_running_service_has_a_healthcheck(compose):
    assert healthcheck_problems(compose) == []


def test_depends_on_targets_exist_and_can_be_satisfied(compose):
    assert depends_on_problems(compose) == []


def test_volumes_are_declared_and_code_is_mounted(compose):
    assert volume_problems(compose) == []


def test_airflow_services_share_the_required_settings(compose):
    assert airflow_settings_problems(compose) == []


def test_no_literal_secrets(compose):
    assert secret_problems(compose) == []


def test_env_example_documents_every_variable():
    assert env_example_problems(load_compose(), ENV_EXAMPLE.read_text(encoding="utf-8")) == []


def test_pools_used_by_tasks_are_created(compose):
    used, _ = scan_code_for("pool", code_files())
    assert pool_problems(compose, used | REQUIRED_POOLS) == []


def test_dockerfiles_match_the_pinned_airflow_and_requirements():
    pinned = re.search(r"^apache-airflow==(\S+)$", (REPO / "requirements.txt").read_text(),
                       re.M).group(1)
    mxnet_venv = "/opt/recforge/mxnet-venv"
    for dockerfile, core, mxnet in (
            ("Dockerfile", ("requirements.txt", "constraints.txt"),
             ("requirements-mxnet.txt", "constraints-mxnet.txt")),
            ("Dockerfile.gpu", ("requirements-gpu.txt", "constraints.txt"),
             ("requirements-mxnet-gpu.txt", "constraints-mxnet-gpu.txt"))):
        text = re.sub(r"\\\n\s*", " ", (REPO / dockerfile).read_text())  # one line per step
        base = rf"^FROM apache/airflow:{re.escape(pinned)}-python3\.11\s*$"
        assert re.search(base, text, re.M), \
            f"{dockerfile} must build FROM apache/airflow:{pinned}-python3.11 (requirements.txt)"
        pips = (r"(?<!/)\bpip", re.escape(f"{mxnet_venv}/bin/pip"))
        for (reqs, cons), pip in zip((core, mxnet), pips, strict=True):
            assert (REPO / reqs).exists() and (REPO / cons).exists(), f"{reqs}, {cons}"
            assert re.search(rf"{pip} install .*-r \S*{re.escape(reqs)} -c \S*{re.escape(cons)}",
                             text), f"{dockerfile} must install {reqs} with -c {cons}"
        assert f"python -m venv {mxnet_venv}" in text, f"{dockerfile}: the MXNet environment"
        assert f"ENV RECFORGE_MXNET_PYTHON={mxnet_venv}/bin/python" in text, \
            f"{dockerfile} must name the MXNet environment for the loader benchmark"
        assert "libquadmath0" in text and "libgomp1" in text, \
            f"{dockerfile}: libmxnet.so needs libgomp.so.1 and libquadmath.so.0 from apt"
        assert re.search(rf"^RUN .*{re.escape(mxnet_venv)}.*\bldd ", text, re.M), \
            f"{dockerfile}: the ldd check must read the MXNet environment's libmxnet.so"
        if dockerfile == "Dockerfile.gpu":
            assert re.search(rf"^RUN {re.escape(mxnet_venv)}/bin/python .*> "
                             r"/tmp/recforge-nvidia-cu11\.conf", text, re.M), \
                "the CUDA 11 wheels to register with ld.so are the MXNet environment's"
        for copied in re.findall(r"^COPY (?:--\S+ )*(.+) \S+$", text, re.M):
            for name in copied.split():
                assert (REPO / name).exists(), f"{dockerfile} copies {name}, which is missing"
    assert "mxnet-cu112==" in (REPO / "requirements-mxnet-gpu.txt").read_text()
    assert not re.search(r"^mxnet", (REPO / "requirements-gpu.txt").read_text(), re.M), \
        "MXNet belongs to the MXNet environment (requirements-mxnet-gpu.txt), not the core"
    dockerignore = (REPO / ".dockerignore").read_text().split()
    assert ".env" in dockerignore, ".env (credentials) must never be sent to the image build"
    assert {".venv", ".venv-*"} <= set(dockerignore), "local environments stay out of the context"


# --- every check can fail ---------------------------------------------------------------------

def _drop(path: list[str]):
    def mutate(c):
        node = c
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return mutate


def _set(path: list, value):
    def mutate(c):
        node = c
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return mutate


def _env(service: str, key: str, value: str):
    return _set(["services", service, "environment", key], value)


BROKEN = {
    "no gpu worker": (
        _drop(["services", "airflow-worker-gpu"]),
        lambda c: queue_problems(c, REQUIRED_QUEUES), "queue 'gpu'"),
    "worker on the wrong queue": (
        _set(["services", "airflow-worker", "command"], "celery worker --queues cpu"),
        lambda c: queue_problems(c, REQUIRED_QUEUES), "queue 'default'"),
    "worker serves an extra queue": (
        _set(["services", "airflow-worker", "command"], ["celery", "worker", "-q", "default,gpu"]),
        worker_problems, "airflow-worker: serves"),
    "gpu worker without a gpu": (
        _drop(["services", "airflow-worker-gpu", "deploy"]),
        worker_problems, "reserves no NVIDIA GPU"),
    "gpu worker from the cpu image": (
        _set(["services", "airflow-worker-gpu", "build"], {"context": ".",
                                                         "dockerfile": "Dockerfile"}),
        worker_problems, "not Dockerfile.gpu"),
    "scheduler without healthcheck": (
        _drop(["services", "airflow-scheduler", "healthcheck"]),
        healthcheck_problems, "airflow-scheduler: long-running"),
    "healthcheck disabled": (
        _set(["services", "mailpit", "healthcheck"], {"disable": True, "test": ["NONE"]}),
        healthcheck_problems, "mailpit: long-running"),
    "one-shot nobody waits for": (
        _set(["services", "redis", "restart"], "no"),
        healthcheck_problems, "redis: restart 'no'"),
    "dependency on a missing service": (
        _set(["services", "airflow-scheduler", "depends_on", "rabbitmq"],
             {"condition": "service_started"}),
        depends_on_problems, "'rabbitmq', which is not a service"),
    "waits for health of a service without a check": (
        _drop(["services", "postgres", "healthcheck"]),
        depends_on_problems, "'postgres' to be healthy"),
    "waits for completion of a service that restarts": (
        _set(["services", "airflow-init", "restart"], "always"),
        depends_on_problems, "'airflow-init' to complete"),
    "undeclared named volume": (
        _drop(["volumes", "rgw-data"]),
        volume_problems, "'rgw-data' is not declared"),
    "declared volume nobody uses": (
        _set(["volumes", "orphan"], None),
        volume_problems, "'orphan' is declared"),
    "include/ not mounted": (
        _set(["services", "airflow-worker", "volumes"], ["./dags:/opt/airflow/dags"]),
        volume_problems, "/opt/airflow/include"),
    "examples on": (
        _env("airflow-scheduler", "AIRFLOW__CORE__LOAD_EXAMPLES", "true"),
        airflow_settings_problems, "LOAD_EXAMPLES"),
    "local executor": (
        _env("airflow-scheduler", "AIRFLOW__CORE__EXECUTOR", "LocalExecutor"),
        airflow_settings_problems, "CeleryExecutor"),
    "S3 endpoint not the compose store": (
        _env("airflow-worker", "AWS_ENDPOINT_URL", "https://s3.amazonaws.com"),
        airflow_settings_problems, "Ceph RGW"),
    "pip at start": (
        _env("airflow-worker", "_PIP_ADDITIONAL_REQUIREMENTS", "mxnet"),
        airflow_settings_problems, "_PIP_ADDITIONAL_REQUIREMENTS"),
    "literal postgres password": (
        _env("postgres", "POSTGRES_PASSWORD", "hunter2"),
        secret_problems, "POSTGRES_PASSWORD is a literal"),
    "literal password in a URL": (
        _env("airflow-worker", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
             "postgresql+psycopg2://airflow:hunter2@postgres/airflow"),
        secret_problems, "URL with a literal password"),
    "literal password in a connection JSON": (
        _env("airflow-worker", "AIRFLOW_CONN_SMTP_DEFAULT",
             '{"conn_type": "smtp", "host": "mailpit", "password": "hunter2"}'),
        secret_problems, "JSON with a literal secret"),
    "missing service": (
        _drop(["services", "mailpit"]),
        service_problems, "'mailpit' is missing"),
    "pool not created": (
        _set(["services", "airflow-init", "command"],
             ["-c", "airflow pools set recforge_pack 8 x"]),
        lambda c: pool_problems(c, REQUIRED_POOLS), "pool 'recforge_gpu_bench'"),
}


class TestChecksCatch:
    @pytest.mark.parametrize("case", sorted(BROKEN))
    def test_broken_copy_is_reported(self, compose, case):
        mutate, check, expected = BROKEN[case]
        assert check(compose) == [], "the real file must pass before the broken copy is tried"
        broken = copy.deepcopy(compose)
        mutate(broken)
        problems = check(broken)
        assert any(expected in p for p in problems), problems

    def test_schema_rejects_an_invalid_file(self, compose):
        if not SCHEMA_FILE.is_file():
            if os.environ.get("CI"):
                pytest.fail(f"Compose Specification schema not found at {SCHEMA_FILE}")
            pytest.skip(f"Compose Specification schema not found at {SCHEMA_FILE}")
        schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
        broken = copy.deepcopy(compose)
        broken["services"]["redis"]["healthcheck"]["retires"] = 5  # typo
        broken["services"]["postgres"]["ports"] = {"5432": "5432"}  # wrong type
        problems = schema_problems(broken, schema)
        assert any("retires" in p for p in problems), problems
        assert any(p.startswith("services/postgres/ports") for p in problems), problems

    def test_env_example_drift_is_reported(self):
        compose_text = COMPOSE_FILE.read_text(encoding="utf-8")
        compose = yaml.safe_load(compose_text)
        env_text = ENV_EXAMPLE.read_text(encoding="utf-8")
        assert env_example_problems(compose, env_text) == []
        drifted = env_text.replace("POSTGRES_PASSWORD=", "POSTGRES_PASSWORD=changed-")
        assert any("POSTGRES_PASSWORD" in p for p in env_example_problems(compose, drifted))
        undocumented = yaml.safe_load(
            compose_text.replace("${S3_API_PORT:-9000}", "${S3_PORT:-9000}"))
        assert any("S3_PORT" in p for p in env_example_problems(undocumented, env_text))
        unlabeled = env_text.replace("DEVELOPMENT ONLY", "defaults")
        assert any("development only" in p for p in env_example_problems(compose, unlabeled))

    def test_code_scanner_finds_queues_and_flags_non_literals(self, tmp_path, compose):
        dag = tmp_path / "dag.py"
        dag.write_text(
            'GPU = "gpu"\n'
            'default_args = {"queue": "io", "retries": 2}\n'
            '@task(queue=GPU, pool="pack")\n'
            'def bench(): ...\n'
            '@task(queue=spec.queue)\n'
            'def other(): ...\n'
        )
        queues, problems = scan_code_for("queue", [dag])
        assert queues == {"gpu", "io"}
        assert len(problems) == 1 and "queue=spec.queue" in problems[0]
        assert scan_code_for("pool", [dag]) == ({"pack"}, [])
        assert queue_problems(compose, queues) == [
            "queue 'io' is used by tasks but no Celery worker serves it (workers serve: "
            "['default', 'gpu']); add a worker with `celery worker --queues io`"
        ]
