"""Topic administration (Kafka's AdminManager of ZooKeeper mode): gregor.admin.topic_admin.TopicAdmin."""
