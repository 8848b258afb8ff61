# One image for the gputopo scheduler extender and device plugin; the entrypoint is the
# `gputopo` command:
#   docker build -t gputopo:dev .
#   docker run --rm -p 8888:8888 gputopo:dev extender --host 0.0.0.0 --state memory --nodes dgx1-v100:2
#   (in a cluster: helm/gputopo runs `gputopo extender ...` and `gputopo device-plugin ...`)
# A GPU workload built FROM this image (or with gputopo pip-installed) can start through
#   gputopo pin -- python train.py     (args: ["pin", "--", "python", "train.py"] here)
# which pins the command to the GPUs' NUMA-local CPUs from GPUTOPO_CPU_AFFINITY, then execs
# it (docs/cpu-pinning.md).
# The build context is filtered by .dockerignore down to what `pip install .` needs.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . .
# The project as a wheel (dependencies are installed from PyPI in the final stage).
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLCONFIGDIR=/tmp/matplotlib
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl && rm -rf /wheels && gputopo --help >/dev/null
# Non-root by default (the chart runs the extender as 65532 with a read-only root filesystem;
# the device plugin overrides this with runAsUser 0 to write the kubelet's socket directory).
USER 65532:65532
EXPOSE 8888 9445
ENTRYPOINT ["gputopo"]
CMD ["--help"]
