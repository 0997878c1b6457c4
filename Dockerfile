# recforge on Airflow 3 — the image for the api-server, scheduler, dag-processor, triggerer and
# the CPU Celery workers (queue `default`). The GPU workers use Dockerfile.gpu.
#
#   docker compose build            (or: docker build -t recforge-airflow:dev .)
#
# Extends the official image the way its docs recommend (docker-stack "Extending the image"):
# Python packages are installed as the `airflow` user, pinned by this repo's constraints.txt,
# which is the same resolved set CI tests with. No credentials are baked in (.env is in
# .dockerignore); they come from the environment at run time.
FROM apache/airflow:3.3.2-python3.11

# MXNet's wheel bundles OpenBLAS and libgfortran.so.3 but links two system libraries it does
# not ship: libgomp.so.1 (OpenMP) and libquadmath.so.0 (needed by the bundled libgfortran;
# GPL, so PyPI wheels may not redistribute it). The official image installs neither.
# opencv-python-headless needs no system libraries (no libGL: that is the non-headless build).
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
USER root
# Debian's point releases replace exact versions, so these stay unpinned (the base tag pins Debian).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 libquadmath0 \
    && apt-get autoremove -yqq --purge \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
USER airflow

# Dependencies first (a layer that changes only when the pins change). apache-airflow is
# pinned to the image's own version in requirements.txt, so pip cannot move it.
COPY --chown=airflow:0 requirements.txt constraints.txt /opt/recforge/
RUN pip install --no-cache-dir -r /opt/recforge/requirements.txt -c /opt/recforge/constraints.txt

# The recforge package itself, a regular (non-editable) install: this copy is what runs when
# the image is used without the compose bind mounts. Its dependencies are already in place.
COPY --chown=airflow:0 pyproject.toml README.md /opt/recforge/
COPY --chown=airflow:0 include/recforge /opt/recforge/include/recforge
RUN pip install --no-cache-dir --no-deps /opt/recforge

# Dataset specs and DAGs baked in, so the image runs on its own; docker-compose.yaml mounts the
# working tree over both for development.
COPY --chown=airflow:0 include/datasets /opt/airflow/include/datasets
COPY --chown=airflow:0 dags /opt/airflow/dags
ENV RECFORGE_SPECS_DIR=/opt/airflow/include/datasets

# Fail the build, not the first task, if a native library is missing.
RUN missing="$(ldd "$(python -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("mxnet").origin).parent / "libmxnet.so")')" | awk '/not found/ {print $1}')" \
    && if [ -n "${missing}" ]; then echo "libmxnet.so cannot load: ${missing}" >&2; exit 1; fi \
    && python -c "import mxnet, cv2, recforge.format.recordio; print('mxnet', mxnet.__version__, 'cv2', cv2.__version__)"
