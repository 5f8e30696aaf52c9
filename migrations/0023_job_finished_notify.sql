-- Long polls (api/waits.py): a job that reaches an end state says so on the `job_finished` channel, whichever
-- process ended it (worker, reconciler, a cancel over HTTP). PostgreSQL delivers it at commit, to listeners only.
CREATE FUNCTION notify_job_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('job_finished', NEW.id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER job_finished AFTER UPDATE OF status ON jobs FOR EACH ROW
    WHEN (NEW.status IN ('succeeded', 'failed', 'canceled') AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION notify_job_finished();
