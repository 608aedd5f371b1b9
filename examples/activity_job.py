"""The pipeline's Spark jobs as a file for spark-submit (the same code `gregor pipeline` runs locally).

    spark-submit --master spark://127.0.0.1:7077 \
        --conf spark.pyspark.python=$(which python) \
        examples/activity_job.py activity --bootstrap-server 127.0.0.1:9092 --output /shared/pipeline-out

Every worker needs gregor installed in the interpreter spark.pyspark.python names.
"""

import sys

from gregor.pipeline.submit import main

if __name__ == "__main__":
    sys.exit(main())
