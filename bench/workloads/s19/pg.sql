create table t(i int, s text);
insert into t select g, md5(g::text) from generate_series(1,3000000) g;
select count(*), sum(length(s)), max(i) from t;
select sum(hashtext(s)::bigint) from t where i % 3 = 0;
