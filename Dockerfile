# One image for every Python service (api, worker, agent, migrate); compose picks the command.
# CPU build by default; a GPU build passes --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128.
FROM python:3.11-slim

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 1000 traincast
WORKDIR /app

# Dependencies first, read from pyproject.toml, so code changes do not reinstall torch.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --extra-index-url "$TORCH_INDEX_URL" -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# Keep the repo layout: shared/core/migrate.py reads /app/migrations.
COPY api/ api/
COPY worker/ worker/
COPY prediction/ prediction/
COPY gpu_agent/ gpu_agent/
COPY shared/ shared/
COPY cli/ cli/
COPY calibration/ calibration/
COPY fleet/ fleet/
COPY migrations/ migrations/
COPY data/ data/
RUN pip install --no-deps -e . \
    && chown -R traincast:traincast /app

# The worker's embedded beat writes celerybeat-schedule into the working directory.
USER traincast

EXPOSE 8000
CMD ["uvicorn", "api.main:app", "--http", "api.server:Protocol", "--no-proxy-headers", "--host", "0.0.0.0", "--port", "8000"]
