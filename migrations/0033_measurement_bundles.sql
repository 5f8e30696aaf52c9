-- Measurement bundles over HTTP (api/routers/measurements.py, admin keys only): the API reads every machine type's
-- measured rows to export them and stores another installation's rows on import. Agents keep their own policy
-- (their machine type only); the API's policies are for the admin endpoint, which checks the key before any SQL.
GRANT SELECT ON layer_benchmarks, op_benchmarks, step_measurements, input_rates, allreduce_timings,
    conv_signatures, op_signatures TO traincast_api;
GRANT INSERT ON layer_benchmarks, op_benchmarks, step_measurements, input_rates, allreduce_timings,
    environments TO traincast_api;
GRANT INSERT (hash, spec), UPDATE (hash) ON conv_signatures TO traincast_api;
GRANT INSERT (hash, op, spec), UPDATE (hash) ON op_signatures TO traincast_api;
GRANT USAGE ON SEQUENCE layer_benchmarks_id_seq, op_benchmarks_id_seq, step_measurements_id_seq,
    input_rates_id_seq, allreduce_timings_id_seq, environments_id_seq, conv_signatures_id_seq,
    op_signatures_id_seq TO traincast_api;
CREATE POLICY api_imports ON layer_benchmarks FOR INSERT TO traincast_api WITH CHECK (true);
CREATE POLICY api_reads ON op_benchmarks FOR SELECT TO traincast_api USING (true);
CREATE POLICY api_imports ON op_benchmarks FOR INSERT TO traincast_api WITH CHECK (true);
CREATE POLICY api_reads ON step_measurements FOR SELECT TO traincast_api USING (true);
CREATE POLICY api_imports ON step_measurements FOR INSERT TO traincast_api WITH CHECK (true);
CREATE POLICY api_reads ON input_rates FOR SELECT TO traincast_api USING (true);
CREATE POLICY api_imports ON input_rates FOR INSERT TO traincast_api WITH CHECK (true);
CREATE POLICY api_reads ON allreduce_timings FOR SELECT TO traincast_api USING (true);
CREATE POLICY api_imports ON allreduce_timings FOR INSERT TO traincast_api WITH CHECK (true);
