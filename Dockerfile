# One image for web, worker and beat.
FROM node:20-slim AS assets
WORKDIR /build
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PORTAL_VAR_DIR=/app/var
WORKDIR /app
COPY pyproject.toml README.md requirements.lock ./
# The locked versions first (a layer that changes only with the lock), then the portal itself.
RUN pip install --no-cache-dir -r requirements.lock
COPY portal ./portal
COPY instances ./instances
COPY billing ./billing
COPY audit ./audit
COPY demo ./demo
RUN pip install --no-cache-dir --no-deps .
COPY . .
COPY --from=assets /build/node_modules ./node_modules
RUN DJANGO_DEBUG=0 DJANGO_SECRET_KEY=collectstatic-only \
    PORTAL_AUDIT_SIGNING_KEY=collectstatic-only-never-signs-anything \
    python manage.py collectstatic --noinput \
    && useradd --create-home portal && mkdir -p var/metrics && chown -R portal var
USER portal
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--config", "gunicorn.conf.py", "--bind", "0.0.0.0:8000"]
