"""Infrastructure every process uses: settings, database, errors, logging, tasks, logins, migrations."""
