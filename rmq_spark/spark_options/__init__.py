"""What the Spark data source (:mod:`rmq_spark.source`) and sink (:mod:`rmq_spark.sink`)
share of their options: reading one option's text as a typed value
(:mod:`.option_values`), and the options that say how to reach brokers
(:mod:`.connect_options`). It lies below both, so neither imports the other for it."""
