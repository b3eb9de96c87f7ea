create table t as select g as id, md5(g::text) as h from generate_series(1, 400000) g;
select count(*), sum(length(h)) from t;
select count(distinct substr(h,1,5)) from t, generate_series(1,40) k where (id + k) % 3 = 0;
select h from t order by h limit 3;
drop table t;
