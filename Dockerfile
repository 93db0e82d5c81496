# The image for the worker, beat, Flower and dashboard services of docker-compose.yml.
FROM python:3.11-slim
RUN useradd --create-home --uid 1000 counters
WORKDIR /app
COPY pyproject.toml README.md celeryconfig.py ./
COPY constraints ./constraints
COPY counters_tasks ./counters_tasks
RUN pip install --no-cache-dir -c constraints/tested.txt ".[cli,flower,ha,fast]"
USER counters
