-- Custom CNNs (ONNX uploads, JSON layer lists), num_classes as a variant axis, stored workloads.

-- An uploaded ONNX graph with the values of its large weight tensors removed (shapes kept).
ALTER TABLE cnns ADD COLUMN graph bytea;
ALTER TABLE cnns ADD COLUMN parameters bigint;

-- num_classes changes a built-in CNN's last layers (SqueezeNet's classifier is a conv);
-- 0 means "as the uploaded definition has it".
ALTER TABLE cnn_layers ADD COLUMN num_classes integer NOT NULL DEFAULT 1000;
ALTER TABLE cnn_layers DROP CONSTRAINT cnn_layers_pkey;
ALTER TABLE cnn_layers ADD PRIMARY KEY (cnn_name, image_size, num_classes, signature_id);

CREATE TABLE cnn_workloads (
    cnn_name     text NOT NULL REFERENCES cnns(name) ON DELETE CASCADE,
    image_size   integer NOT NULL,
    num_classes  integer NOT NULL,
    conv_count   integer NOT NULL,
    workload     jsonb NOT NULL,
    PRIMARY KEY (cnn_name, image_size, num_classes)
);
