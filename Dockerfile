# recforge on Airflow 3 — the image for the api-server, scheduler, dag-processor, triggerer and
# the CPU Celery workers (queue `default`). The GPU workers use Dockerfile.gpu.
#
#   docker compose build            (or: docker build -t recforge-airflow:dev .)
#
# Extends the official image the way its docs recommend (docker-stack "Extending the image"):
# Python packages are installed as the `airflow` user, pinned by this repo's constraints.txt
# and constraints-mxnet.txt, the same resolved sets CI tests with. No credentials are baked in
# (.env is in .dockerignore); they come from the environment at run time.
FROM apache/airflow:3.3.2-python3.11

# Two Python environments, because MXNet 1.9.1 (its last release) needs numpy < 1.24 and
# Airflow, pandas, GX and OpenCV need numpy 2:
# - the core: the image's own Python (Airflow's, as the `airflow` user), requirements.txt
#   within constraints.txt: Airflow, GX, numpy 2, OpenCV 4.14 and recforge;
# - the MXNet environment: /opt/recforge/mxnet-venv, requirements-mxnet.txt within
#   constraints-mxnet.txt: mxnet 1.9.1, numpy 1.23.5, OpenCV 4.11 and recforge. The loader
#   benchmark runs its MXNet work there, one child process per benchmark, found through
#   RECFORGE_MXNET_PYTHON (below).
#
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
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /opt/recforge \
    && chown airflow:0 /opt/recforge
USER airflow

# Dependencies first (layers that change only when the pins change). apache-airflow is
# pinned to the image's own version in requirements.txt, so pip cannot move it.
COPY --chown=airflow:0 requirements.txt constraints.txt /opt/recforge/
RUN pip install --no-cache-dir -r /opt/recforge/requirements.txt -c /opt/recforge/constraints.txt

# The MXNet environment. The official image sets PIP_USER=true (installs go to ~airflow/.local);
# a virtual environment refuses --user installs, so its pip runs with PIP_USER=false.
COPY --chown=airflow:0 requirements-mxnet.txt constraints-mxnet.txt /opt/recforge/
RUN python -m venv /opt/recforge/mxnet-venv \
    && PIP_USER=false /opt/recforge/mxnet-venv/bin/pip install --no-cache-dir --disable-pip-version-check \
        -r /opt/recforge/requirements-mxnet.txt -c /opt/recforge/constraints-mxnet.txt
ENV RECFORGE_MXNET_PYTHON=/opt/recforge/mxnet-venv/bin/python

# The recforge package itself, one wheel installed into both environments (regular, not
# editable): this copy is what runs when the image is used without the compose bind mounts.
# These four paths are all a build needs (tests/packaging builds its wheel from the same set).
COPY --chown=airflow:0 pyproject.toml README.md LICENSE /opt/recforge/
COPY --chown=airflow:0 include/recforge /opt/recforge/include/recforge
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /tmp/recforge-dist /opt/recforge \
    && pip install --no-cache-dir -c /opt/recforge/constraints.txt /tmp/recforge-dist/recforge-*.whl \
    && PIP_USER=false /opt/recforge/mxnet-venv/bin/pip install --no-cache-dir --disable-pip-version-check \
        -c /opt/recforge/constraints-mxnet.txt /tmp/recforge-dist/recforge-*.whl \
    && rm -rf /tmp/recforge-dist

# Dataset specs and DAGs baked in, so the image runs on its own; docker-compose.yaml mounts the
# working tree over both for development.
COPY --chown=airflow:0 include/datasets /opt/airflow/include/datasets
COPY --chown=airflow:0 dags /opt/airflow/dags
ENV RECFORGE_SPECS_DIR=/opt/airflow/include/datasets

# Fail the build, not the first task, if a native library is missing or the two environments
# disagree: libmxnet.so of the MXNet environment must resolve every library it links, each
# environment must import what it runs, and both must hold the same recforge.
RUN mxpy=/opt/recforge/mxnet-venv/bin/python \
    && libmxnet="$("${mxpy}" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("mxnet").origin).parent / "libmxnet.so")')" \
    && missing="$(ldd "${libmxnet}" | awk '/not found/ {print $1}')" \
    && if [ -n "${missing}" ]; then echo "libmxnet.so cannot load: ${missing}" >&2; exit 1; fi \
    && "${mxpy}" -m pip check \
    && "${mxpy}" -c "import mxnet, numpy, cv2, recforge.bench.worker; print('MXNet environment: mxnet', mxnet.__version__, 'numpy', numpy.__version__, 'cv2', cv2.__version__)" \
    && python -c "import numpy, pandas, cv2, recforge.format.recordio; print('core: numpy', numpy.__version__, 'pandas', pandas.__version__, 'cv2', cv2.__version__)" \
    && core="$(python -c 'import recforge; print(recforge.__version__)')" \
    && mx="$("${mxpy}" -c 'import recforge; print(recforge.__version__)')" \
    && if [ "${core}" != "${mx}" ]; then echo "recforge ${core} (core) != ${mx} (MXNet environment)" >&2; exit 1; fi
