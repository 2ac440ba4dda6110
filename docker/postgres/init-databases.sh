#!/usr/bin/env bash
# The databases of the team stack (docker/compose.yaml), created once, when PostgreSQL's data
# volume is new: the postgres image runs /docker-entrypoint-initdb.d/* then, as its superuser.
#   - MLflow: one role, a database for tracking and the registry, one for its basic-auth users;
#   - Prefect's server: one role, a database with pg_trgm (Prefect's migrations need it).
# Passwords come from the environment (docker/.env); role and database names may be changed.
set -euo pipefail
: "${MLFLOW_DB_PASSWORD:?set MLFLOW_DB_PASSWORD (docker/.env)}"
: "${PREFECT_DB_PASSWORD:?set PREFECT_DB_PASSWORD (docker/.env)}"

psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
    --set=mlflow_user="${MLFLOW_DB_USER:-mlflow}" \
    --set=mlflow_password="$MLFLOW_DB_PASSWORD" \
    --set=mlflow_db="${MLFLOW_DB_NAME:-mlflow}" \
    --set=mlflow_auth_db="${MLFLOW_AUTH_DB_NAME:-mlflow_auth}" \
    --set=prefect_user="${PREFECT_DB_USER:-prefect}" \
    --set=prefect_password="$PREFECT_DB_PASSWORD" \
    --set=prefect_db="${PREFECT_DB_NAME:-prefect}" <<'SQL'
CREATE ROLE :"mlflow_user" LOGIN PASSWORD :'mlflow_password';
CREATE DATABASE :"mlflow_db" OWNER :"mlflow_user";
CREATE DATABASE :"mlflow_auth_db" OWNER :"mlflow_user";
CREATE ROLE :"prefect_user" LOGIN PASSWORD :'prefect_password';
CREATE DATABASE :"prefect_db" OWNER :"prefect_user";
\connect :"prefect_db"
CREATE EXTENSION IF NOT EXISTS pg_trgm;
SQL
echo "orchrm: databases ${MLFLOW_DB_NAME:-mlflow}, ${MLFLOW_AUTH_DB_NAME:-mlflow_auth} and ${PREFECT_DB_NAME:-prefect} created"
