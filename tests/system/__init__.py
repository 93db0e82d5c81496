"""The stack as a whole: real workers and beat, scale, cluster, RabbitMQ, history, the routes that must agree."""
